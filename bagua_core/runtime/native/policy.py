"""Which implementation serves the kernels: the ``BAGUA_NATIVE`` policy.

``BAGUA_NATIVE=auto`` (default) uses the compiled kernels when the CPU library
(``bagua_core.runtime.native.library``) imports and the pure-torch fallbacks otherwise; ``native`` raises
ImportError at import when it is missing; ``python`` always uses the fallbacks (CPU and CUDA tensors
alike). Both give bit-identical results. ``BAGUA_NATIVE_THREADS`` (default 1) lets the CPU kernels split
large tensors over threads.

Example::

    $ BAGUA_NATIVE=python python -c "import bagua_core.runtime.native as n; print(n.backend)"
    python
"""

from __future__ import annotations

import functools
import os
from types import ModuleType

import torch

from bagua_core.runtime.native import library

__all__ = ["POLICIES", "POLICY_ENV", "THREADS_ENV", "cpu_backend", "cpu_kernels_take", "load_cpu_backend",
           "read_policy", "read_threads"]

POLICY_ENV = "BAGUA_NATIVE"
THREADS_ENV = "BAGUA_NATIVE_THREADS"
POLICIES = ("auto", "native", "python")


def read_policy() -> str:
    """The validated value of ``BAGUA_NATIVE`` (``"auto"`` when unset)."""
    value = os.environ.get(POLICY_ENV, "auto").strip().lower() or "auto"
    if value not in POLICIES:
        raise ValueError(f"{POLICY_ENV} must be one of {', '.join(POLICIES)}; got {value!r}")
    return value


def read_threads() -> int:
    """The validated value of ``BAGUA_NATIVE_THREADS`` (1 when unset)."""
    raw = os.environ.get(THREADS_ENV, "1").strip() or "1"
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if not 1 <= threads <= 64:
        raise ValueError(f"{THREADS_ENV} must be an integer in 1..64, got {raw!r}")
    return threads


def load_cpu_backend(policy: str) -> tuple[ModuleType | None, str]:
    """``(module, "")`` with the compiled CPU library, or ``(None, why not)`` under ``auto``/``python``."""
    if policy == "python":
        return None, f"{POLICY_ENV}=python"
    try:
        compiled = library.library()
    except ImportError as exc:
        if policy == "native":
            raise ImportError(
                f"{POLICY_ENV}=native but the compiled module {library.MODULE} cannot be imported "
                f"({exc}); rebuild it with `pip install -e .` (needs gcc and cffi) or set {POLICY_ENV}=auto"
            ) from exc
        return None, f"{library.MODULE} is not built ({exc})"
    library.set_threads(read_threads())
    return compiled, ""


@functools.cache
def cpu_backend() -> tuple[ModuleType | None, str]:
    """The compiled CPU library under this process's policy, loaded once: ``(module, "")`` or
    ``(None, why not)``. ``bagua_core.runtime.native`` and the kernels' owners all ask here."""
    return load_cpu_backend(read_policy())


def cpu_kernels_take(*tensors: torch.Tensor) -> bool:
    """True when the CPU library serves calls under the policy and every tensor is an fp32 or uint8 CPU
    tensor, so that one of its kernels can take them."""
    if cpu_backend()[0] is None:
        return False
    return all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.uint8) for t in tensors)
