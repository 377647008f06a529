"""``ScaledSign``: one bit per value and one fp32 scale per chunk (EF-SignSGD's compressor).

A chunk ``x`` is stored as ``scale = mean(abs(x))`` and the bits ``x >= 0`` (eight per byte, the
first value in the lowest bit); decoded ``scale * (+1 or -1)``. It keeps the chunk's L1 norm and the
signs; it is biased, so use it with error feedback (Karimireddy et al., 2019). A chunk holding NaN/Inf
decodes to NaN.

Example::

    >>> codec = get_codec("ScaledSign")
    >>> codec.encoded_size(1000)                   # 4 + 125 bytes, padded to 136
    136
"""

from __future__ import annotations

import torch

from bagua_codecs.rowwise import RowwiseCodec

__all__ = ["ScaledSignCodec"]


def _bit_weights(device: torch.device) -> torch.Tensor:
    return torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=device)


class ScaledSignCodec(RowwiseCodec):
    """1-bit signs with the chunk's mean absolute value."""

    name = "ScaledSign"
    bits_per_element = 1
    header_bytes = 4
    unbiased = False

    def row_headers(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = values.abs().mean(dim=1, keepdim=True)
        ok = torch.isfinite(scale).view(-1)
        scale = torch.where(ok.view(-1, 1), scale, torch.full_like(scale, float("nan")))
        return scale.view(torch.uint8), ok

    def quantise(self, values: torch.Tensor, headers: torch.Tensor) -> torch.Tensor:
        rows, count = values.shape
        bits = values >= 0
        if count % 8:
            bits = torch.cat([bits, bits.new_zeros(rows, 8 - count % 8)], dim=1)
        weighted = bits.view(rows, -1, 8).to(torch.uint8) * _bit_weights(values.device)
        return weighted.sum(dim=2, dtype=torch.uint8)

    def dequantise(self, payload: torch.Tensor, headers: torch.Tensor, count: int) -> torch.Tensor:
        rows = payload.shape[0]
        bits = payload.unsqueeze(2).bitwise_and(_bit_weights(payload.device)).ne(0).view(rows, -1)[:, :count]
        scale = headers.contiguous().view(torch.float32)
        return torch.where(bits, scale, -scale)
