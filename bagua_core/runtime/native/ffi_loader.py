"""The cffi ABI-mode ``FFI`` objects of the run-time loaded libraries (CUDA kernels, NCCL).

Built by ``setup.py`` as ``bagua_core._native_cuda_ffi`` / ``bagua_core._nccl_ffi`` from the headers in
``native/`` (``native/build_extras.py`` lists which); in a source checkout that was never built, those
headers themselves are parsed instead.
"""

from __future__ import annotations

import importlib
import os
import sys

from cffi import FFI

__all__ = ["load_ffi"]


def load_ffi(module: str) -> FFI:
    """The ``ffi`` of ``bagua_core.<module>``, or one parsed from its headers in ``native/``."""
    try:
        return importlib.import_module(f"bagua_core.{module}").ffi
    except ImportError:
        pass
    native_dir = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "native")  # the repository's native/
    if not os.path.isfile(os.path.join(native_dir, "build_extras.py")):
        raise ImportError(f"bagua_core.{module} is not built and {os.path.abspath(native_dir)} is not there; "
                          "reinstall bagua")
    saved = list(sys.path)
    sys.path.insert(0, os.path.abspath(native_dir))
    try:
        from build_extras import ABI_MODULES
        from cdef_header import cdef_from_header, header_path
    finally:
        sys.path[:] = saved  # build_extras puts native/ on the path too
    ffi = FFI()
    for header in ABI_MODULES[module]:
        with open(header_path(header)) as f:
            ffi.cdef(cdef_from_header(f.read()))
    return ffi
