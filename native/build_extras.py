"""Build steps ``setup.py`` runs after the cffi extension: the run-time loaded pieces.

* ``write_abi_modules``: cffi out-of-line ABI modules ``_native_cuda_ffi.py`` and ``_nccl_ffi.py``
  (the parsed cdefs of the headers ``ABI_MODULES`` lists; the libraries are dlopen-ed).
* ``build_cuda_library``: ``_native_cuda.so`` from ``CUDA_SOURCES`` with nvcc (one library: its shared
  part and the CUDA kernels every owner's ``kernels.toml`` lists, ``kernel_sets.py``), skipped with
  a printed note when nvcc is missing, fails, or ``BAGUA_BUILD_CUDA=0``; never fails the install.
  ``BAGUA_CUDA_ARCHS`` (default ``"80;90"``) lists the SM binaries; PTX of the lowest is added so
  newer GPUs JIT it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from cffi import FFI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdef_header import cdef_from_header, header_path
from kernel_sets import find_kernel_sets

__all__ = ["ABI_MODULES", "build_cuda_library", "find_nvcc", "write_abi_modules"]

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL_SETS = find_kernel_sets()
ABI_MODULES = {
    "_native_cuda_ffi": (header_path("bagua_cuda.h"), *(h for s in KERNEL_SETS for h in s.cuda_headers)),
    "_nccl_ffi": (header_path("nccl_api.h"),),
}
"""The run-time loaded libraries' ffi modules and the headers of each one's cdef (``bagua_core.runtime.native``
parses these headers itself in a source checkout that was never built)."""
CUDA_SOURCES = (header_path("bagua_cuda.cu"), *(c for s in KERNEL_SETS for c in s.cuda_sources))
CUDA_INTERNAL_HEADERS = tuple(dict.fromkeys(h for s in KERNEL_SETS for h in s.internal_headers + s.public_headers))
CUDA_INCLUDE_DIRS = tuple(dict.fromkeys([HERE, *(d for s in KERNEL_SETS if s.cuda_sources for d in s.include_dirs)]))
CUDA_LIBRARY = "_native_cuda.so"


def write_abi_modules(package_dir: str, package: str = "bagua_core") -> list[str]:
    """Writes the ABI-mode ffi modules into ``package_dir``; returns their paths."""
    written = []
    for module, headers in ABI_MODULES.items():
        ffi = FFI()
        for header in headers:
            with open(header_path(header)) as f:
                ffi.cdef(cdef_from_header(f.read()))
        ffi.set_source(f"{package}.{module}", None)
        path = os.path.join(package_dir, module + ".py")
        ffi.emit_python_code(path)
        written.append(path)
    return written


def find_nvcc() -> str | None:
    """nvcc from PATH, then $CUDA_HOME/bin, then /usr/local/cuda/bin."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


def _nvcc_command(nvcc: str, output: str) -> list[str]:
    archs = [a.strip() for a in os.environ.get("BAGUA_CUDA_ARCHS", "80;90").split(";") if a.strip()]
    gencode = []
    for arch in archs:
        gencode += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    gencode += ["-gencode", f"arch=compute_{archs[0]},code=compute_{archs[0]}"]
    # -fmad=false and no --use_fast_math: results must be bit-identical to the CPU kernels
    return [
        nvcc,
        "-O3",
        "-std=c++17",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-fmad=false",
        "-cudart",
        "static",
        *gencode,
        *(f"-I{directory}" for directory in CUDA_INCLUDE_DIRS),
        *CUDA_SOURCES,
        "-o",
        output,
    ]


def build_cuda_library(package_dir: str) -> str | None:
    """Compiles the CUDA kernels into ``package_dir``; returns the path, or None when skipped."""
    if os.environ.get("BAGUA_BUILD_CUDA", "1").strip().lower() in ("0", "false", "no", "off"):
        print("bagua: BAGUA_BUILD_CUDA=0, CUDA kernels not built")
        return None
    nvcc = find_nvcc()
    if nvcc is None:
        print("bagua: nvcc not found, CUDA kernels not built (CUDA tensors use the torch formula)")
        return None
    output = os.path.join(package_dir, CUDA_LIBRARY)
    headers = ABI_MODULES["_native_cuda_ffi"] + CUDA_INTERNAL_HEADERS
    sources = [*CUDA_SOURCES, *map(header_path, headers), os.path.abspath(__file__)]
    if os.path.exists(output) and os.path.getmtime(output) >= max(map(os.path.getmtime, sources)):
        print(f"bagua: {output} is up to date")
        return output
    command = _nvcc_command(nvcc, output)
    print("bagua: " + " ".join(command))
    try:
        subprocess.run(command, check=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"bagua: building the CUDA kernels failed ({exc}); skipped, CUDA tensors use the torch formula")
        return None
    return output
