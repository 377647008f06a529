"""The compiled CPU kernel library (``bagua_core._native_cpu``, cffi API mode): loading it, its threads,
its shared status codes, and pointers to tensors for its functions.

One library holds every CPU kernel of ``native/``; this module knows none of them. The packages that own
kernels (a codec's, an algorithm's) wrap their functions themselves (``library().lib.<function>``) and
translate their own status codes, then :func:`check_status` the shared ones. The C calls release the GIL.

Example::

    >>> lib = library().lib                          # ImportError when it was not built
    >>> rc = lib.<a kernel>(float_ptr(x), x.numel(), ...)
    >>> check_status(rc, "<what the caller called>")   # ValueError on a shared error code
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import torch

__all__ = ["MODULE", "check_status", "byte_ptr", "float_ptr", "get_threads", "library", "set_threads"]

MODULE = "bagua_core._native_cpu"
"""The compiled module (``native/build_cpu.py`` builds it; ``pip install -e .`` runs that)."""


def library() -> ModuleType:
    """The compiled module (attributes ``ffi`` and ``lib``), whatever the ``BAGUA_NATIVE`` policy; raises
    ImportError when it was not built. Whether the kernels *serve* calls is the policy's
    (``bagua_core.runtime.native.backend``)."""
    return importlib.import_module(MODULE)


def float_ptr(t: torch.Tensor) -> Any:
    """``float *`` to the first element of the fp32 tensor ``t``."""
    return library().ffi.cast("float *", t.data_ptr())


def byte_ptr(t: torch.Tensor) -> Any:
    """``uint8_t *`` to the first byte of ``t``."""
    return library().ffi.cast("uint8_t *", t.data_ptr())


def check_status(rc: int, what: str) -> None:
    """Nothing for ``BAGUA_NATIVE_OK``; a ValueError saying what went wrong in ``what`` otherwise (a
    kernel's own codes are translated by its owner before this)."""
    lib = library().lib
    if rc == lib.BAGUA_NATIVE_OK:
        return
    if rc == lib.BAGUA_NATIVE_ERR_SIZE:
        raise ValueError(f"{what}: buffer size does not match compressed_size(numel, n_chunks)")
    raise ValueError(f"{what}: invalid argument (native error code {rc})")


def set_threads(n_threads: int) -> None:
    """Lets the kernels split large tensors over ``n_threads`` threads (1 = the calling thread)."""
    lib = library().lib
    if lib.bagua_native_set_threads(n_threads) != lib.BAGUA_NATIVE_OK:
        raise ValueError(f"threads must be an integer in 1..64, got {n_threads!r}")


def get_threads() -> int:
    """The number of threads the kernels may use."""
    return library().lib.bagua_native_get_threads()
