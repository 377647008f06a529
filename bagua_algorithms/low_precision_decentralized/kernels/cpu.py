"""low_precision_decentralized's C kernels (``native/low_precision_decentralized.c`` in the CPU library
``bagua_core._native_cpu``): the round's difference with the min/max of its result, and the update from
three MinMaxUInt8 buffers, one pass each. fp32 CPU tensors only; the C calls release the GIL. Importing
this module raises ImportError where the library was not built.

Example::

    >>> stats = minmax_stats()
    >>> lpd_diff(x, w, left, right, z, stats)     # z = x + left/3 + right/3 - (5/3) w; stats: min, max, NaN
"""

from __future__ import annotations

import torch

from bagua_core.kernels import byte_ptr, check_status, cpu_library, float_ptr

__all__ = ["lpd_diff", "lpd_update"]

_ffi, _lib = cpu_library().ffi, cpu_library().lib  # ImportError where it was not built


def lpd_diff(x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor, z: torch.Tensor,
             stats: torch.Tensor) -> torch.Tensor:
    """``z = x + left/3 + right/3 - (5/3) w`` in torch's fp32 order, merging the min/max/NaN flag of z into ``stats``."""
    rc = _lib.bagua_lpd_diff_f32(float_ptr(x), float_ptr(w), float_ptr(left), float_ptr(right), x.numel(),
                                 float_ptr(z), float_ptr(stats))
    check_status(rc, "lpd_difference")
    return z


def lpd_update(q_left: torch.Tensor, q_right: torch.Tensor, q_own: torch.Tensor, w: torch.Tensor, left: torch.Tensor,
               right: torch.Tensor, x: torch.Tensor | None, begin: int, end: int) -> None:
    """``left += D(q_left)``, ``right += D(q_right)``, ``w += D(q_own)``, ``x = w`` on the elements [begin, end)."""
    rc = _lib.bagua_lpd_update_f32(byte_ptr(q_left), byte_ptr(q_right), byte_ptr(q_own), q_own.numel(), w.numel(),
                                   float_ptr(w), float_ptr(left), float_ptr(right),
                                   _ffi.NULL if x is None else float_ptr(x), begin, end)
    check_status(rc, "lpd_update")
