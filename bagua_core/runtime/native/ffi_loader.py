"""The cffi ABI-mode ``FFI`` objects of the run-time loaded libraries (CUDA kernels, NCCL).

Built by ``setup.py`` as ``bagua_core._native_cuda_ffi`` / ``bagua_core._nccl_ffi`` from the headers
in ``native/``; in a source checkout that was never built, the header itself is parsed instead.
"""

from __future__ import annotations

import importlib
import os
import sys

from cffi import FFI

__all__ = ["load_ffi"]

_HEADERS = {"_native_cuda_ffi": "minmax_uint8_cuda.h", "_nccl_ffi": "nccl_api.h"}


def load_ffi(module: str) -> FFI:
    """The ``ffi`` of ``bagua_core.<module>``, or one parsed from its header in ``native/``."""
    try:
        return importlib.import_module(f"bagua_core.{module}").ffi
    except ImportError:
        pass
    native_dir = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "native")  # the repository's native/
    header = os.path.join(native_dir, _HEADERS[module])
    if not os.path.isfile(header):
        raise ImportError(f"bagua_core.{module} is not built and {header} is not there; reinstall bagua")
    sys.path.insert(0, os.path.abspath(native_dir))
    try:
        from cdef_header import cdef_from_header
    finally:
        sys.path.pop(0)
    ffi = FFI()
    with open(header) as f:
        ffi.cdef(cdef_from_header(f.read()))
    return ffi
