"""``fp16`` and ``bf16``: the values rounded to a 16-bit float format, no header.

Communicated: two bytes per value. fp16 overflows to +-inf above 65504 (as torch DDP's fp16 hook);
bf16 keeps fp32's range with 8 bits of mantissa. NaN/Inf travel as themselves.

Example::

    >>> codec = get_codec("bf16")
    >>> codec.decode(codec.encode(x), 1, out)      # out == x.bfloat16().float()
"""

from __future__ import annotations

import torch

from bagua_codecs.rowwise import RowwiseCodec

__all__ = ["Float16Codec", "BFloat16Codec"]


class _HalfCodec(RowwiseCodec):
    bits_per_element = 16
    header_bytes = 0
    unbiased = False
    dtype: torch.dtype = torch.float16

    def row_headers(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        empty = torch.empty(values.shape[0], 0, dtype=torch.uint8, device=values.device)
        return empty, torch.isfinite(values).all(dim=1)

    def quantise(self, values: torch.Tensor, headers: torch.Tensor) -> torch.Tensor:
        return values.to(self.dtype).view(torch.uint8)

    def dequantise(self, payload: torch.Tensor, headers: torch.Tensor, count: int) -> torch.Tensor:
        return payload.contiguous().view(self.dtype)[:, :count].float()


class Float16Codec(_HalfCodec):
    """IEEE half precision."""

    name = "fp16"
    dtype = torch.float16


class BFloat16Codec(_HalfCodec):
    """bfloat16 (fp32's exponent, 8 bits of mantissa)."""

    name = "bf16"
    dtype = torch.bfloat16
