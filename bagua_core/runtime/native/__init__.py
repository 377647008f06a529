"""The Python side of ``native/``: which compiled kernels serve this process, and the NCCL communicator.

``native/`` builds every C kernel into one CPU library and every CUDA kernel into one CUDA library; the packages
that own kernels wrap them and fall back to torch where they do not serve. This package loads the libraries,
applies the policy (:mod:`.policy`) and reports:

* ``backend``: ``"native"`` when the CPU library serves calls, else ``"python"`` (policy
  ``BAGUA_NATIVE=auto|native|python``); ``native_policy``, and ``native_unavailable_reason`` ("" when
  native);
* ``has_cuda_kernels`` / ``cuda_unavailable_reason``: the CUDA library (CUDA tensors use the owners'
  torch formulas without it);
* ``has_nccl`` / ``nccl_unavailable_reason``: the NCCL communicator (:mod:`.nccl`).

Argument checks the wrappers share, and ``NonFiniteError``, are in :mod:`.checks`.

Example::

    >>> import bagua_core.runtime.native as native
    >>> native.backend, native.native_unavailable_reason
    ('native', '')
"""

from __future__ import annotations

from bagua_core.runtime.native import cuda as _cuda
from bagua_core.runtime.native.checks import NonFiniteError
from bagua_core.runtime.native.policy import cpu_backend, read_policy

__all__ = [
    "NonFiniteError",
    "backend",
    "cuda_unavailable_reason",
    "has_cuda_kernels",
    "has_nccl",
    "native_policy",
    "native_unavailable_reason",
    "nccl_unavailable_reason",
    "native_report",
]

native_policy: str = read_policy()  # not "policy": that name is the submodule
_cpu, native_unavailable_reason = cpu_backend()
backend: str = "native" if _cpu is not None else "python"


def native_report() -> dict[str, object]:
    """Which compiled kernels and communicator serve this process, and why not where they do not.

    Example::

        >>> native_report()
        {'backend': 'native', 'policy': 'auto', 'reason': '', 'cuda_kernels': False, 'cuda_reason': '...',
         'nccl': False, 'nccl_reason': '...'}
    """
    from bagua_core.runtime.native import nccl_lib

    return {"backend": backend, "policy": native_policy, "reason": native_unavailable_reason,
            "cuda_kernels": backend == "native" and _cuda.available(),
            "cuda_reason": native_unavailable_reason if backend != "native" else _cuda.unavailable_reason(),
            "nccl": nccl_lib.available(), "nccl_reason": nccl_lib.unavailable_reason()}


def __getattr__(name: str) -> object:
    # capabilities that need CUDA/NCCL probing are computed on first access
    if name == "has_cuda_kernels":
        return backend == "native" and _cuda.available()
    if name == "cuda_unavailable_reason":
        return native_unavailable_reason if backend != "native" else _cuda.unavailable_reason()
    if name in ("has_nccl", "nccl_unavailable_reason"):
        from bagua_core.runtime.native import nccl_lib

        return nccl_lib.available() if name == "has_nccl" else nccl_lib.unavailable_reason()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
