"""``MinMaxUInt8`` (the kernels of ``bagua_codecs.minmax_kernels``, byte for byte, with their fused steps) and
``MinMaxUInt4``.

MinMaxUInt8 of a chunk ``x`` (eps = 1e-7, rint = round half to even): ``scale = 255 / (max - min + eps)``,
``upper = rint(max * scale)``, ``lower = upper - 255``, ``q = uint8(min(rint(x * scale), upper) - lower)``;
decoded ``(q + lower) / scale``. MinMaxUInt4 is the same formula with 15 in place of 255 and two values
per byte (the first in the low nibble). Both store the chunk's fp32 min and max as the header.

Example::

    >>> codec = get_codec("MinMaxUInt8")
    >>> torch.equal(codec.encode(x, 4), bagua_codecs.minmax_kernels.compress_minmax_uint8(x, 4))
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_codecs import minmax_kernels as kernels
from bagua_codecs.minmax_kernels.layout import EPS
from bagua_codecs.rowwise import RowwiseCodec
from bagua_core.codecs import Codec
from bagua_core.kernels import native_backend

__all__ = ["MinMaxUInt8Codec", "MinMaxUInt4Codec"]


class MinMaxUInt8Codec(Codec):
    """One byte per value between the chunk's min and max; ``bagua_codecs.minmax_kernels``' kernels (C, CUDA,
    or their torch fallback), fused where it pays: the min/max of an averaged chunk is gathered while it is
    written (its header needs no second pass), and the own chunk is decoded while it is encoded. (The
    low-precision decentralized ring fuses its own steps with this codec's kernels, in its package.)"""

    name = "MinMaxUInt8"
    bits_per_element = 8
    header_bytes = 8
    unbiased = False

    @property
    def native(self) -> bool:
        return native_backend() == "native"

    def encode(self, x: torch.Tensor, n_chunks: int = 1, *, out: torch.Tensor | None = None,
               nonfinite: str = "propagate") -> torch.Tensor:
        return kernels.compress_minmax_uint8(x, n_chunks, nonfinite=nonfinite, out=out)

    def encode_headers(self, x: torch.Tensor, n_chunks: int, out: torch.Tensor, *, nonfinite: str = "propagate") -> torch.Tensor:
        return kernels.compress_minmax_uint8_headers(x, n_chunks, out, nonfinite=nonfinite)

    def encode_range(self, x: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int) -> torch.Tensor:
        return kernels.quantise_minmax_uint8(x, n_chunks, out, begin, min(end, self.chunk_numel(x.numel(), n_chunks)))

    def decode(self, buf: torch.Tensor, n_chunks: int, out: torch.Tensor, *, accumulate: bool = False,
               begin: int = 0, end: int | None = None) -> torch.Tensor:
        return kernels.decompress_minmax_uint8(buf, n_chunks, out, accumulate=accumulate, begin=begin, end=end)

    def decode_average(self, bufs: Sequence[torch.Tensor] | torch.Tensor, n: int, out: torch.Tensor, *,
                       average: bool = True, begin: int = 0, end: int | None = None) -> torch.Tensor:
        return kernels.decompress_average_minmax_uint8(bufs, n, out, average, begin=begin, end=end)

    # --- the fused steps (bagua_core.codecs.base) ---------------------------------------------------------
    def new_stats(self) -> torch.Tensor:
        return kernels.minmax_stats()

    def decode_average_with_stats(self, bufs: Sequence[torch.Tensor] | torch.Tensor, n: int, out: torch.Tensor,
                                  stats: torch.Tensor | None, *, average: bool = True, begin: int = 0,
                                  end: int | None = None) -> torch.Tensor:
        return kernels.decompress_average_minmax_uint8(bufs, n, out, average, begin=begin, end=end, stats=stats)

    def encode_headers_with_stats(self, x: torch.Tensor, n_chunks: int, out: torch.Tensor, stats: torch.Tensor | None,
                                  *, nonfinite: str = "propagate") -> torch.Tensor:
        if stats is not None and n_chunks == 1:
            return kernels.minmax_uint8_headers_from_stats(stats, x.numel(), out, nonfinite=nonfinite)
        return kernels.compress_minmax_uint8_headers(x, n_chunks, out, nonfinite=nonfinite)

    def encode_range_decoding(self, x: torch.Tensor, out: torch.Tensor, begin: int, end: int,
                              decoded: torch.Tensor) -> torch.Tensor:
        return kernels.quantise_minmax_uint8(x, 1, out, begin, end, decompressed=decoded)


class MinMaxUInt4Codec(RowwiseCodec):
    """Sixteen levels between the chunk's min and max, two values per byte."""

    name = "MinMaxUInt4"
    bits_per_element = 4
    header_bytes = 8
    unbiased = False
    LEVELS = 15

    def _params(self, headers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scale, lower)`` [rows, 1] of the headers' fp32 min/max."""
        minmax = headers.contiguous().view(torch.float32)
        mn, mx = minmax[:, :1], minmax[:, 1:2]
        scale = torch.full_like(mn, float(self.LEVELS)).div((mx - mn) + torch.full_like(mn, EPS))
        upper = torch.round(mx * scale)
        return scale, upper - torch.full_like(mn, float(self.LEVELS))

    def row_headers(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mn, mx = torch.aminmax(values, dim=1, keepdim=True)
        zero = torch.zeros_like(mn)
        minmax = torch.cat([mn + zero, mx + zero], dim=1)  # -0 -> +0
        scale, lower = self._params(minmax.view(torch.uint8))
        ok = (torch.isfinite(minmax).all(dim=1, keepdim=True) & torch.isfinite(scale) & torch.isfinite(lower)
              & torch.isfinite(torch.round(mn * scale))).view(-1)
        minmax = torch.where(ok.view(-1, 1), minmax, torch.full_like(minmax, float("nan")))
        return minmax.view(torch.uint8), ok

    def quantise(self, values: torch.Tensor, headers: torch.Tensor) -> torch.Tensor:
        scale, lower = self._params(headers)
        upper = lower + float(self.LEVELS)
        q = torch.round(values * scale).minimum(upper).sub(lower).clamp(0.0, float(self.LEVELS))
        q = torch.nan_to_num(q, nan=0.0).to(torch.uint8)
        if q.shape[1] % 2:
            q = torch.cat([q, q.new_zeros(q.shape[0], 1)], dim=1)
        return q[:, 0::2].bitwise_or(q[:, 1::2].bitwise_left_shift(4))

    def dequantise(self, payload: torch.Tensor, headers: torch.Tensor, count: int) -> torch.Tensor:
        scale, lower = self._params(headers)
        q = torch.stack([payload.bitwise_and(15), payload.bitwise_right_shift(4)], dim=2).view(payload.shape[0], -1)
        return (q[:, :count].float() + lower) / scale
