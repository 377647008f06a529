"""cffi builder (out-of-line API mode) of ``bagua_core._native_cpu``, the one library of every CPU kernel:
its shared part (threads, status codes: ``bagua_native.h``, ``parallel.c``), the MinMaxUInt8 codec's
kernels (``minmax_uint8*``, wrapped by ``bagua_codecs.minmax_kernels``), low_precision_decentralized's
fused steps (``low_precision_decentralized.*``, wrapped by that algorithm's ``kernels`` package) and
qadam's Adam update (``adam_update.*``, wrapped by ``bagua_algorithms.q_adam.kernels``). The module's
name says nothing of its kernels: the core loads it (``bagua_core.runtime.native``), the owners call them.

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

__all__ = ["ffibuilder"]

HERE = os.path.dirname(os.path.abspath(__file__))
# -ffp-contract=off: no FMA contraction (results must equal the torch fallback bit for bit);
# never -ffast-math: rintf must stay round-half-to-even and the NaN checks must survive.
COMPILE_ARGS = ["-std=c11", "-O3", "-ffp-contract=off", "-fno-math-errno", "-fvisibility=hidden"]
if sys.platform == "win32" or platform.python_implementation() != "CPython":
    COMPILE_ARGS = []

HEADERS = ("bagua_native.h", "minmax_uint8.h", "low_precision_decentralized.h", "adam_update.h")  # the cdef
SOURCES = ("parallel.c", "minmax_uint8.c", "minmax_uint8_fused.c", "low_precision_decentralized.c", "adam_update.c")
INTERNAL_HEADERS = ("parallel.h", "minmax_uint8_internal.h")

ffibuilder = FFI()
for name in HEADERS:
    with open(header_path(name)) as header:
        ffibuilder.cdef(cdef_from_header(header.read()))
ffibuilder.set_source(
    "bagua_core._native_cpu",
    "".join(f'#include "{name}"\n' for name in HEADERS),
    sources=[os.path.relpath(os.path.join(HERE, name)) for name in SOURCES],
    depends=[os.path.relpath(os.path.join(HERE, name)) for name in HEADERS + INTERNAL_HEADERS],
    include_dirs=[HERE],
    extra_compile_args=COMPILE_ARGS,
    libraries=["m", "pthread"] if sys.platform != "win32" else [],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
