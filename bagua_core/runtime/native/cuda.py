"""The CUDA kernel library (``bagua_core/_native_cuda.so``, loaded with cffi in ABI mode): loading it,
calling its functions on the current torch CUDA stream, and its error codes.

One library holds every CUDA kernel of ``native/``; this module knows none of them. The packages that own
kernels wrap their functions with :func:`call` (which raises on a non-zero return), :func:`pointer` and
:func:`stream`.

Example::

    >>> if available():
    ...     with torch.cuda.device(x.device):
    ...         call("<a kernel>", pointer(x, "float *"), x.numel(), stream(x.device))
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["LIBRARY_PATH", "available", "call", "library", "null", "pointer", "stream", "unavailable_reason"]

# bagua_core/_native_cuda.so: setup.py builds it at the top of the package, two levels above this file
LIBRARY_PATH = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                                             "_native_cuda.so"))
_loaded: tuple[Any, Any, str] | None = None  # (ffi, lib, reason)


def _load() -> tuple[Any, Any, str]:
    global _loaded
    if _loaded is None:
        _loaded = _try_load()
    return _loaded


def _try_load() -> tuple[Any, Any, str]:
    if not os.path.isfile(LIBRARY_PATH):
        return (
            None,
            None,
            f"{LIBRARY_PATH} was not built (nvcc missing at install time, or BAGUA_BUILD_CUDA=0)",
        )
    if not torch.cuda.is_available():
        return None, None, "no CUDA device (torch.cuda.is_available() is False)"
    try:
        from bagua_core.runtime.native.ffi_loader import load_ffi

        ffi = load_ffi("_native_cuda_ffi")
        lib = ffi.dlopen(LIBRARY_PATH)
    except (ImportError, OSError) as exc:
        return None, None, f"cannot load {LIBRARY_PATH}: {exc}"
    rc = lib.bagua_cuda_probe()
    if rc != 0:
        return None, None, f"CUDA kernels unusable: {ffi.string(lib.bagua_cuda_error_string(rc)).decode()}"
    return ffi, lib, ""


def available() -> bool:
    """True when the CUDA kernels are built and a CUDA device can run them."""
    return _load()[1] is not None


def unavailable_reason() -> str:
    """Why ``available()`` is False ("" when it is True)."""
    return _load()[2]


def library() -> Any:
    """The loaded library (its functions as attributes); RuntimeError when it is unavailable."""
    lib = _load()[1]
    if lib is None:
        raise RuntimeError(f"the bagua CUDA kernels are unavailable: {unavailable_reason()}")
    return lib


def call(function: str, *args: Any) -> None:
    """``library().<function>(*args)``; a non-zero return raises ValueError (an argument the kernel refused)
    or RuntimeError (a CUDA error), with the library's text for it."""
    rc = getattr(library(), function)(*args)
    if rc != 0:
        message = _load()[0].string(library().bagua_cuda_error_string(rc)).decode()
        raise (ValueError if rc < 0 else RuntimeError)(f"{function} failed: {message}")


def pointer(t: torch.Tensor, ctype: str) -> Any:
    """``ctype`` (e.g. ``"float *"``) pointing at the first element of the CUDA tensor ``t``."""
    return _load()[0].cast(ctype, t.data_ptr())


def null() -> Any:
    """The NULL pointer of the library's ffi."""
    return _load()[0].NULL


def stream(device: torch.device) -> Any:
    """The current torch CUDA stream of ``device`` as a ``void *`` (kernels queue their work on it)."""
    return _load()[0].cast("void *", torch.cuda.current_stream(device).cuda_stream)
