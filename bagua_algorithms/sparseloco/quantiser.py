"""sparseloco's quantiser: the values a chunk sends in ``bits`` bits each, with a 6-byte scale per chunk.

For ``bits`` b in {2, 4, 8}: one sign bit and b - 1 magnitude bits, L = 2^(b-1) magnitude levels spread evenly
from the chunk's floor to its ceiling (fp32 arithmetic, rint = round half to even)::

    hi   = the largest |v| the chunk sends                      (fp32, 4 bytes)
    q    = rint(lo / hi * 65535), lo the smallest |v| it sends   (16 bits; 0 when hi is 0 or not finite)
    lo'  = hi * q / 65535                                        (the floor, as every replica computes it)
    j    = clamp(rint((|v| - lo') / (hi - lo') * (L - 1)), 0, L - 1)    (0 when hi == lo')
    code = (v < 0) * L + j
    decoded: w = j / (L - 1),  v' = +-(lo' * (1 - w) + hi * w)

At b = 2 (L = 2) the levels are exactly ``lo'`` and ``hi``: a value goes to the nearer one (a tie to ``lo'``).
A chunk holding a NaN or an infinity decodes to NaN (hi = +inf, so lo' = NaN), as an allreduce carries it. The
sender decodes its own codes with the same function as the receivers, so what it keeps (``e - sent``) is
exactly what the others did not get. Codes are packed 8/b to a byte, the first in the lowest bits. Nothing
here is communicated. The native kernels (``kernels/native/sparseloco_arith.h``, shared by C and CUDA) compute
each step as the same single fp32 operation in this order, so they give these functions' bits.

Example::

    >>> hi, q, codes = quantise(values, entry_chunk, hi, lo, bits=2)
    >>> dequantise(codes, entry_chunk, hi, q, bits=2)         # values, at one of +-lo', +-hi each
"""

from __future__ import annotations

import torch

__all__ = ["FLOOR_LEVELS", "quantise", "dequantise", "pack", "unpack"]

FLOOR_LEVELS = 65535
"""The floor ``lo`` travels as a 16-bit fraction of ``hi``."""


def _floor(hi: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return hi * q.to(torch.float32) / FLOOR_LEVELS


def quantise(values: torch.Tensor, entry_chunk: torch.Tensor, hi: torch.Tensor, lo: torch.Tensor,
             bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(hi, q, codes)`` of the fp32 ``values`` (entries chunk by chunk, ``entry_chunk`` their chunks), given
    each chunk's largest and smallest ``|v|`` sent (``hi``, ``lo``; NaN counted as +inf): hi as fp32, q as int32
    in [0, 65535], the codes as uint8 (module doc)."""
    levels = 1 << (bits - 1)
    finite = torch.isfinite(hi) & (hi > 0)
    q = torch.where(finite, torch.round(lo / torch.where(finite, hi, 1.0) * FLOOR_LEVELS), 0.0)
    q = q.clamp_(0, FLOOR_LEVELS).to(torch.int32)
    floor = _floor(hi, q)
    top, bottom = hi[entry_chunk], floor[entry_chunk]
    span = top - bottom
    position = torch.where(span > 0, (values.abs() - bottom) / torch.where(span > 0, span, 1.0) * (levels - 1), 0.0)
    j = torch.round(position.nan_to_num_(0.0)).clamp_(0, levels - 1).to(torch.uint8)
    codes = j | ((values < 0).to(torch.uint8) << (bits - 1))
    return hi.to(torch.float32), q, codes


def dequantise(codes: torch.Tensor, entry_chunk: torch.Tensor, hi: torch.Tensor, q: torch.Tensor,
               bits: int) -> torch.Tensor:
    """The fp32 values of ``codes`` (module doc)."""
    levels = 1 << (bits - 1)
    w = (codes & (levels - 1)).to(torch.float32) / (levels - 1)
    magnitude = _floor(hi, q)[entry_chunk] * (1 - w) + hi[entry_chunk] * w
    return torch.where((codes >> (bits - 1)).bool(), -magnitude, magnitude)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """``ceil(len * bits / 8)`` bytes holding the ``bits``-bit ``codes``, 8/bits to a byte, the first lowest."""
    per = 8 // bits
    padded = torch.zeros(-(-codes.numel() // per) * per, dtype=torch.uint8, device=codes.device)
    padded[: codes.numel()] = codes
    padded = padded.view(-1, per)
    out = padded[:, 0].clone()
    for i in range(1, per):
        out |= padded[:, i] << (bits * i)
    return out


def unpack(packed: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    """The first ``count`` codes of :func:`pack`'s bytes."""
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    return ((packed.unsqueeze(1) >> shifts) & ((1 << bits) - 1)).view(-1)[:count]
