"""Finds and opens ``libnccl.so.2`` at run time (cffi ABI mode, cdef from ``native/nccl_api.h``).

Search order: ``$BAGUA_NCCL_LIBRARY`` (a path), the ``nvidia-nccl-cu*`` wheel that CUDA builds of
torch install (``nvidia/nccl/lib/libnccl.so.2``), then the system loader. NCCL needs a CUDA device;
without one ``available()`` is False and ``unavailable_reason()`` says so.

Example::

    >>> from bagua_core.runtime.native import nccl_lib
    >>> nccl_lib.available() or print(nccl_lib.unavailable_reason())
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch

from bagua_core.runtime.exceptions import BaguaError

__all__ = [
    "LIBRARY_ENV",
    "NCCLError",
    "NCCLUnavailableError",
    "available",
    "candidates",
    "load",
    "nccl_dtype",
    "nccl_op",
    "unavailable_reason",
]

LIBRARY_ENV = "BAGUA_NCCL_LIBRARY"
_loaded: tuple[Any, Any, str] | None = None  # (ffi, lib, reason)


class NCCLUnavailableError(BaguaError):
    """The NCCL communicator was asked for where it cannot run; the message says why."""


class NCCLError(BaguaError):
    """An NCCL call returned an error; the message holds ncclGetErrorString's text."""


def candidates() -> list[str]:
    """The library paths/names tried, in order."""
    found = []
    if os.environ.get(LIBRARY_ENV):
        found.append(os.environ[LIBRARY_ENV])
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    for root in (spec.submodule_search_locations or []) if spec else []:
        found.append(os.path.join(root, "lib", "libnccl.so.2"))
    found.append("libnccl.so.2")
    return found


def _try_load() -> tuple[Any, Any, str]:
    if not torch.cuda.is_available():
        return None, None, "no CUDA device (torch.cuda.is_available() is False); NCCL needs one"
    from bagua_core.runtime.native.ffi_loader import load_ffi

    try:
        ffi = load_ffi("_nccl_ffi")
    except ImportError as exc:
        return None, None, str(exc)
    errors = []
    for name in candidates():
        try:
            lib = ffi.dlopen(name)
        except OSError as exc:
            errors.append(f"{name}: {exc}")
            continue
        return ffi, lib, ""
    return None, None, "libnccl.so.2 not found: " + "; ".join(errors) + f" (set {LIBRARY_ENV} to its path)"


def load() -> tuple[Any, Any]:
    """``(ffi, lib)`` of the loaded NCCL, or NCCLUnavailableError saying why it cannot be loaded."""
    global _loaded
    if _loaded is None:
        _loaded = _try_load()
    ffi, lib, reason = _loaded
    if lib is None:
        raise NCCLUnavailableError(f"the NCCL communicator is unavailable: {reason}")
    return ffi, lib


def available() -> bool:
    """True when libnccl.so.2 is loaded and a CUDA device exists."""
    try:
        load()
    except NCCLUnavailableError:
        return False
    return True


def unavailable_reason() -> str:
    """Why ``available()`` is False ("" when it is True)."""
    return "" if available() else _loaded[2]  # type: ignore[index]


# NCCL's enums (nccl.h): note its max (2) / min (3) order differs from ReduceOp's MIN=2, MAX=3
_OPS = {0: 0, 1: 1, 2: 3, 3: 2, 10: 4}  # ReduceOp value -> ncclRedOp_t
_DTYPES = {
    torch.int8: 0,
    torch.uint8: 1,
    torch.bool: 1,
    torch.int32: 2,
    torch.int64: 4,
    torch.float16: 6,
    torch.float32: 7,
    torch.float64: 8,
    torch.bfloat16: 9,
}


def nccl_op(op: object) -> int:
    """The ``ncclRedOp_t`` of a reduce op; ValueError for the bitwise ops NCCL lacks."""
    from bagua_core.runtime.communication.reduce_op import to_reduce_op

    ours = to_reduce_op(op)
    if ours.value not in _OPS:
        raise ValueError(f"ReduceOp.{ours.name} is not supported by NCCL (SUM, PRODUCT, MIN, MAX, AVG are)")
    return _OPS[ours.value]


def nccl_dtype(dtype: torch.dtype) -> int:
    """The ``ncclDataType_t`` of a torch dtype."""
    if dtype not in _DTYPES:
        raise TypeError(f"NCCL cannot communicate {dtype} tensors (supported: {sorted(map(str, _DTYPES))})")
    return _DTYPES[dtype]
