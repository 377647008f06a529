"""The dispatch of low_precision_decentralized's steps: per codec (fused for MinMaxUInt8, composed for the
others), then per device (C, CUDA or the torch reference). See the package's docstring.

Example::

    >>> z = lpd_difference(x, w, left, right, torch.empty_like(x))   # x + left/3 + right/3 - (5/3) w
"""

from __future__ import annotations

import torch

from bagua_algorithms.low_precision_decentralized.kernels import cuda as _cuda
from bagua_algorithms.low_precision_decentralized.kernels import reference as _reference
from bagua_codecs import MinMaxUInt8Codec, check_minmax_uint8_buffer, merge_minmax_stats
from bagua_core.codecs import Codec
from bagua_core.kernels import check_f32, cpu_kernels_take, cuda_available

try:
    from bagua_algorithms.low_precision_decentralized.kernels import cpu as _cpu
except ImportError:  # not built: the policy reports the fallback then
    _cpu = None

__all__ = ["composed_update", "difference", "fuses", "lpd_difference", "lpd_update", "update"]


def fuses(codec: Codec) -> bool:
    """True when this package has fused steps for ``codec`` (MinMaxUInt8, whose buffers its kernels read)."""
    return isinstance(codec, MinMaxUInt8Codec)


def lpd_difference(x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor, out: torch.Tensor,
                   stats: torch.Tensor | None = None) -> torch.Tensor:
    """``out = x + left/3 + right/3 - w * (5/3)`` evaluated as torch evaluates that expression in fp32
    (``((x + left/3) + right/3) - w * float(5/3)``), and the min/max/NaN flag of ``out`` merged into ``stats``
    (MinMaxUInt8's ``minmax_stats()``) when given. All fp32, contiguous, same size and device. Returns ``out``."""
    check_f32("x", x)
    for name, t in (("w", w), ("left", left), ("right", right), ("out", out)):
        check_f32(name, t, x.numel(), x.device)
    if stats is not None:
        check_f32("stats", stats, 3)
    if _cpu is not None and stats is not None and cpu_kernels_take(x, w, left, right, out, stats):
        return _cpu.lpd_diff(x, w, left, right, out, stats)
    if x.device.type == "cuda" and cuda_available():
        _cuda.lpd_diff(x, w, left, right, out)
        if stats is not None:
            merge_minmax_stats(stats, out)
        return out
    return _reference.lpd_diff(x, w, left, right, out, stats)


def lpd_update(from_left: torch.Tensor, from_right: torch.Tensor, own: torch.Tensor, w: torch.Tensor,
               left: torch.Tensor, right: torch.Tensor, x: torch.Tensor | None = None, *, begin: int = 0,
               end: int | None = None) -> None:
    """On the elements [begin, end): ``left += D(from_left)``, ``right += D(from_right)``, ``w += D(own)``
    (fp32, one-chunk MinMaxUInt8 buffers of ``w.numel()`` values), then ``x = w`` when ``x`` is given.
    ``from_left`` may be ``from_right`` (two ranks: one neighbour)."""
    check_f32("w", w)
    numel = w.numel()
    for name, t in (("left", left), ("right", right)) + ((("x", x),) if x is not None else ()):
        check_f32(name, t, numel, w.device)
    for name, buf in (("from_left", from_left), ("from_right", from_right), ("own", own)):
        check_minmax_uint8_buffer(buf, numel, 1, name)
        if buf.device != w.device:
            raise ValueError(f"{name} is on {buf.device}, expected {w.device}")
    end = numel if end is None else end
    if isinstance(begin, bool) or not isinstance(begin, int) or begin < 0 or end < begin:
        raise ValueError(f"need 0 <= begin <= end, got begin={begin!r}, end={end!r}")
    if _cpu is not None and cpu_kernels_take(w, left, right, from_left, from_right, own,
                                             *(() if x is None else (x,))):
        return _cpu.lpd_update(from_left, from_right, own, w, left, right, x, begin, end)
    if w.device.type == "cuda" and cuda_available():
        return _cuda.lpd_update(from_left, from_right, own, w, left, right, x, begin, min(end, numel))
    return _reference.lpd_update(from_left, from_right, own, w, left, right, x, begin, end)


def difference(codec: Codec, x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor,
               z: torch.Tensor, stats: torch.Tensor | None = None) -> torch.Tensor:
    """``z = x + left/3 + right/3 - (5/3) w``; for a codec this package :func:`fuses`, the statistics of z
    are merged into ``stats`` (``codec.new_stats()``) in the same pass, for ``codec.encode_headers_with_stats``.
    Other codecs gather nothing (pass ``stats=None`` to their ``encode_headers_with_stats``)."""
    if fuses(codec):
        return lpd_difference(x, w, left, right, z, stats)
    return lpd_difference(x, w, left, right, z)


def composed_update(codec: Codec, from_left: torch.Tensor, from_right: torch.Tensor, own: torch.Tensor,
                    w: torch.Tensor, left: torch.Tensor, right: torch.Tensor, x: torch.Tensor | None, begin: int,
                    end: int) -> None:
    """The update of any codec, from its plain steps: on ``[begin, end)``, ``codec.decode(buf, 1, target,
    accumulate=True)`` into ``left``, ``right`` and ``w`` (one-chunk buffers; ``from_left`` may be
    ``from_right``), then ``x = w`` when ``x`` is given."""
    for buf, target in ((from_left, left), (from_right, right), (own, w)):
        codec.decode(buf, 1, target, accumulate=True, begin=begin, end=end)
    if x is not None:
        x[begin:end].copy_(w[begin:end])


def update(codec: Codec, from_left: torch.Tensor, from_right: torch.Tensor, own: torch.Tensor, w: torch.Tensor,
           left: torch.Tensor, right: torch.Tensor, x: torch.Tensor | None, begin: int, end: int) -> None:
    """:func:`composed_update`, in one pass (:func:`lpd_update`) for a codec this package :func:`fuses`."""
    if fuses(codec):
        lpd_update(from_left, from_right, own, w, left, right, x, begin=begin, end=end)
    else:
        composed_update(codec, from_left, from_right, own, w, left, right, x, begin, end)
