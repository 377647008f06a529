"""The API of a plugin package with C or CUDA kernels: the libraries bagua built them into, and the checks
their wrappers share.

A package that owns kernels lists their sources in a ``kernels.toml`` beside them (``native/build_cpu.py`` and
``native/build_extras.py`` compile every listed source into one CPU library and one CUDA library: see
``docs/native.md``); at run time it calls them through this module and falls back to torch where they do not
serve (``cpu_kernels_take``, ``cuda_available``).

- **The CPU library** (cffi, API mode): ``cpu_library()`` (its ``lib`` has every listed function),
  ``float_ptr``/``byte_ptr`` (a tensor's data as a C pointer), ``check_status`` (a C return code as an
  exception), ``get_threads``/``set_threads`` (the kernels' thread pool), ``native_backend()`` (``"native"``
  when the CPU library serves calls, else ``"python"``: ``BAGUA_NATIVE``), ``cpu_kernels_take`` (whether these
  tensors go to it).
- **The CUDA library** (cffi, ABI mode): ``cuda_available()``, ``cuda_call(function, *args)`` (on the current
  stream, the error checked), ``cuda_pointer``, ``cuda_null``, ``cuda_stream``.
- **Argument checks**: ``check_input``, ``check_output``, ``check_f32``, ``check_range``, ``check_nonfinite``, and
  ``NonFiniteError``.

Example::

    >>> from bagua_core.kernels import check_status, cpu_kernels_take, cpu_library, float_ptr
    >>> if cpu_kernels_take(x, out):
    ...     check_status(cpu_library().lib.my_scale_f32(float_ptr(x), float_ptr(out), x.numel(), 2.0), "my_scale")
"""

from __future__ import annotations

from bagua_core.runtime import native as _native
from bagua_core.runtime.native.checks import (
    NonFiniteError,
    check_f32,
    check_input,
    check_nonfinite,
    check_output,
    check_range,
)
from bagua_core.runtime.native.cuda import available as cuda_available
from bagua_core.runtime.native.cuda import call as cuda_call
from bagua_core.runtime.native.cuda import library as cuda_library
from bagua_core.runtime.native.cuda import null as cuda_null
from bagua_core.runtime.native.cuda import pointer as cuda_pointer
from bagua_core.runtime.native.cuda import stream as cuda_stream
from bagua_core.runtime.native.library import byte_ptr, check_status, float_ptr, get_threads, set_threads
from bagua_core.runtime.native.library import library as cpu_library
from bagua_core.runtime.native.policy import cpu_kernels_take

__all__ = [
    "cpu_library",
    "float_ptr",
    "byte_ptr",
    "check_status",
    "get_threads",
    "set_threads",
    "native_backend",
    "cpu_kernels_take",
    "cuda_available",
    "cuda_call",
    "cuda_library",
    "cuda_pointer",
    "cuda_null",
    "cuda_stream",
    "check_input",
    "check_output",
    "check_f32",
    "check_range",
    "check_nonfinite",
    "NonFiniteError",
]


def native_backend() -> str:
    """``"native"`` when the CPU library serves calls in this process, else ``"python"`` (``BAGUA_NATIVE``)."""
    return _native.backend
