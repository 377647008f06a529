"""BAGUA_NATIVE policy, capability flags, the cdef helper and the benchmark module's smoke run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bagua_codecs import minmax_kernels as minmax
from bagua_core.runtime import native
from bagua_core.runtime.native import policy

ROOT = Path(__file__).resolve().parent.parent


def test_policy_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(policy.POLICY_ENV, raising=False)
    assert policy.read_policy() == "auto"
    monkeypatch.setenv(policy.POLICY_ENV, " Python ")
    assert policy.read_policy() == "python"
    monkeypatch.setenv(policy.POLICY_ENV, "fast")
    with pytest.raises(ValueError, match="auto, native, python"):
        policy.read_policy()
    monkeypatch.setenv(policy.THREADS_ENV, "0")
    with pytest.raises(ValueError, match="BAGUA_NATIVE_THREADS"):
        policy.read_threads()
    monkeypatch.setenv(policy.THREADS_ENV, "2")
    assert policy.read_threads() == 2


def test_python_policy_never_loads_native() -> None:
    module, reason = policy.load_cpu_backend("python")
    assert module is None and "BAGUA_NATIVE=python" in reason


def test_missing_module_fails_loudly_only_under_native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bagua_core._native_cpu", None)  # import now raises ImportError
    with pytest.raises(ImportError, match="BAGUA_NATIVE=native.*pip install"):
        policy.load_cpu_backend("native")
    module, reason = policy.load_cpu_backend("auto")
    assert module is None and "not built" in reason


def test_backend_reports_what_loaded() -> None:
    assert native.backend in ("native", "python")
    assert native.native_policy in policy.POLICIES
    assert (native.native_unavailable_reason == "") == (native.backend == "native")
    assert isinstance(native.has_cuda_kernels, bool) and isinstance(native.has_nccl, bool)
    if not torch.cuda.is_available():
        assert not native.has_cuda_kernels and not native.has_nccl
        assert native.cuda_unavailable_reason and "CUDA" in native.nccl_unavailable_reason
    with pytest.raises(AttributeError):
        native.no_such_thing  # noqa: B018


def test_python_policy_end_to_end_gives_the_same_bytes() -> None:
    code = (
        "import torch, bagua_core.runtime.native as n, bagua_codecs.minmax_kernels as m;"
        "x = torch.linspace(-3, 5, 1001); print(n.backend, m.compress_minmax_uint8(x, 3).sum().item())"
    )
    env = dict(os.environ, BAGUA_NATIVE="python")
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    backend, checksum = result.stdout.split()
    assert backend == "python"
    assert int(checksum) == minmax.compress_minmax_uint8(torch.linspace(-3, 5, 1001), 3).sum().item()


def test_headers_are_the_cdef_source() -> None:
    saved = list(sys.path)
    sys.path.insert(0, str(ROOT / "native"))
    try:
        from build_cpu import HEADERS  # every header of the CPU library's cdef
        from build_extras import ABI_MODULES  # and of the run-time loaded libraries'
        from cdef_header import cdef_from_header, header_path
    finally:
        sys.path[:] = saved
    import cffi

    for header in HEADERS + sum(ABI_MODULES.values(), ()):
        text = cdef_from_header(Path(header_path(header)).read_text())
        assert "#include" not in text and 'extern "C"' not in text
        cffi.FFI().cdef(text)  # parses


def test_benchmark_module_smoke() -> None:
    spec = importlib.util.spec_from_file_location(
        "bench_compression", ROOT / "benchmarks" / "test_bench_compression.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    rates = module.measure(numel=1024, rounds=1)
    assert {"torch_formula", "memcpy"} <= set(rates) and all(rate > 0 for rate in rates.values())


def test_every_kernel_is_listed_by_its_owner_and_built() -> None:
    """``native/`` holds the build and the shared part only; each owner lists its kernels in a ``kernels.toml``
    beside them, and every C function such a header declares is in the built CPU library."""
    import re

    import cffi

    saved = list(sys.path)
    sys.path.insert(0, str(ROOT / "native"))
    try:
        from cdef_header import cdef_from_header
        from kernel_sets import find_kernel_sets
    finally:
        sys.path[:] = saved
    sets = find_kernel_sets()
    names = {s.name for s in sets}
    assert {"bagua_codecs/minmax_kernels/native", "bagua_algorithms/q_adam/native",
            "bagua_algorithms/low_precision_decentralized/kernels/native"} <= names, names
    shared = {p.name for p in (ROOT / "native").iterdir() if p.suffix in (".c", ".h", ".cu", ".cuh")}
    owned = {Path(f).name for s in sets for f in s.cpu_sources + s.cpu_headers + s.cuda_sources + s.cuda_headers}
    assert shared and not shared & owned, shared & owned
    from bagua_core.runtime.native.library import library

    lib = library().lib
    for kernel_set in sets:
        for header in kernel_set.cpu_headers:
            declared = cdef_from_header(Path(header).read_text())
            cffi.FFI().cdef(declared)
            functions = re.findall(r"\b(bagua_\w+)\s*\(", declared)
            assert functions, header
            missing = [f for f in functions if not hasattr(lib, f)]
            assert not missing, f"{header}: not in the built library: {missing}"
