"""cffi builder (out-of-line API mode) of ``bagua_core._native_cpu``, the one library of every CPU kernel:
its shared part (threads, status codes: ``bagua_native.h``, ``parallel.c``) and every kernel an owner lists in
its ``kernels.toml`` (``kernel_sets.py``: a codec's, an algorithm's). The module's name says nothing of its
kernels: the core loads it (``bagua_core.runtime.native``), the owners call them (``bagua_core.kernels``).

Run by ``pip install .`` through ``setup.py`` (``cffi_modules``), or by hand:
``python native/build_cpu.py`` builds the module in the current directory.
"""

from __future__ import annotations

import os
import platform
import sys

from cffi import FFI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdef_header import cdef_from_header, header_path
from kernel_sets import find_kernel_sets

__all__ = ["ffibuilder"]

HERE = os.path.dirname(os.path.abspath(__file__))
# -ffp-contract=off: no FMA contraction (results must equal the torch fallback bit for bit);
# never -ffast-math: rintf must stay round-half-to-even and the NaN checks must survive.
COMPILE_ARGS = ["-std=c11", "-O3", "-ffp-contract=off", "-fno-math-errno", "-fvisibility=hidden"]
if sys.platform == "win32" or platform.python_implementation() != "CPython":
    COMPILE_ARGS = []

KERNEL_SETS = find_kernel_sets()
HEADERS = (header_path("bagua_native.h"), *(h for s in KERNEL_SETS for h in s.cpu_headers))  # the cdef
SOURCES = (header_path("parallel.c"), *(c for s in KERNEL_SETS for c in s.cpu_sources))
INTERNAL_HEADERS = (header_path("parallel.h"),
                    *dict.fromkeys(h for s in KERNEL_SETS for h in s.internal_headers + s.public_headers))
INCLUDE_DIRS = tuple(dict.fromkeys([HERE, *(d for s in KERNEL_SETS for d in s.include_dirs)]))

ffibuilder = FFI()
for name in HEADERS:
    with open(header_path(name)) as header:
        ffibuilder.cdef(cdef_from_header(header.read()))
ffibuilder.set_source(
    "bagua_core._native_cpu",
    "".join(f'#include "{os.path.basename(path)}"\n' for path in HEADERS),
    sources=[os.path.relpath(path) for path in SOURCES],
    depends=[os.path.relpath(path) for path in HEADERS + INTERNAL_HEADERS],
    include_dirs=list(INCLUDE_DIRS),
    extra_compile_args=COMPILE_ARGS,
    libraries=["m", "pthread"] if sys.platform != "win32" else [],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
