"""Turns a C header of this folder into a cffi cdef: the header stays the single source of truth.

Preprocessor lines (and ``#ifdef __cplusplus`` blocks) are dropped except ``#define NAME <integer>``, which cffi understands as a
constant. Used by the builder scripts (build time) and, for the run-time loaded libraries (CUDA
kernels, NCCL), by ``bagua_core.runtime.native`` when the generated ffi module is missing.
"""

from __future__ import annotations

import os
import re

__all__ = ["cdef_from_header", "header_path"]

_DEFINE_INT = re.compile(r"^#define\s+\w+\s+-?(0x[0-9a-fA-F]+|\d+)\s*$")
_HERE = os.path.dirname(os.path.abspath(__file__))


def header_path(name: str) -> str:
    """Absolute path of the file ``name`` of ``native/`` (an absolute path stays as it is)."""
    return os.path.join(_HERE, name)


def cdef_from_header(text: str) -> str:
    """The cdef source of a header's text: declarations plus integer ``#define`` constants."""
    lines = []
    in_cplusplus = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#ifdef __cplusplus"):
            in_cplusplus = True  # `extern "C" {` guards are for C++ compilers only
            continue
        if in_cplusplus:
            in_cplusplus = not stripped.startswith("#endif")
            continue
        if stripped.startswith("#"):
            if _DEFINE_INT.match(stripped):
                lines.append(stripped)
            continue
        lines.append(line)
    return "\n".join(lines)
