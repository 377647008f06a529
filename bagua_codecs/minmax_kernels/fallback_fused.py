"""Pure-torch versions of MinMaxUInt8's fused kernels: the plain fallback kernels composed, step by step.

Each is the definition its native (C) counterpart must equal bit for bit: the fused kernels only save
passes over memory. Operands of arithmetic are fp32 tensors (no Python-scalar divisors, see
``bagua_codecs.minmax_kernels.fallback``), so CPU and CUDA give the same values.

Example::

    >>> stats = new_stats(torch.device("cpu"))
    >>> own = decompress_sum(bufs, torch.empty(m), True, stats=stats)   # stats: min, max, NaN seen of own
    >>> headers_from_stats(stats, m, buf, "raise")                      # == fallback.headers(own, 1, ...)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_codecs.minmax_kernels import fallback
from bagua_codecs.minmax_kernels.layout import HEADER_BYTES, NonFiniteError, nonfinite_message

__all__ = ["decompress_sum", "headers_from_stats", "merge_stats", "new_stats", "quantise"]


_NO_VALUE = torch.tensor([float("inf"), float("-inf"), 0.0], dtype=torch.float32)


def new_stats(device: torch.device) -> torch.Tensor:
    """``{min, max, NaN seen}`` of no value yet: ``[inf, -inf, 0]`` (fp32)."""
    return _NO_VALUE.clone() if device.type == "cpu" else _NO_VALUE.to(device)


def merge_stats(stats: torch.Tensor, values: torch.Tensor) -> None:
    """Merges the min, max and NaN flag of ``values`` into ``stats`` (in place)."""
    if values.numel() == 0:
        return
    v = values.reshape(-1).float()
    mn, mx = torch.aminmax(v)
    stats[0] = torch.minimum(stats[0], mn)
    stats[1] = torch.maximum(stats[1], mx)
    stats[2] = torch.maximum(stats[2], torch.isnan(v).any().float())


def decompress_sum(bufs: Sequence[torch.Tensor], out: torch.Tensor, average: bool, begin: int = 0,
                   end: int | None = None, stats: torch.Tensor | None = None) -> torch.Tensor:
    """``fallback.decompress_sum``, then the written values' stats merged into ``stats``."""
    fallback.decompress_sum(bufs, out, average, begin, end)
    if stats is not None:
        stop = min(out.numel(), out.numel() if end is None else end)
        merge_stats(stats, out.view(-1)[min(begin, stop) : stop])
    return out


def headers_from_stats(stats: torch.Tensor, numel: int, out: torch.Tensor, nonfinite: str) -> torch.Tensor:
    """The one-chunk header and zero padding that ``fallback.headers(x, 1, ...)`` writes for values
    whose min, max and NaN flag are ``stats``."""
    zero = torch.zeros(1, dtype=torch.float32, device=out.device)
    mn, mx = stats[0:1].to(out.device), stats[1:2].to(out.device)
    if numel == 0:
        mn, mx = zero, zero
    mn, mx = mn + zero, mx + zero  # -0 -> +0
    _, _, _, ok = fallback.minmax_params(mn, mx)
    ok = ok & (stats[2:3].to(out.device) == 0)
    if nonfinite == "raise" and not bool(ok.all()):
        overflow = bool(torch.isfinite(mn).all() & torch.isfinite(mx).all()) and float(stats[2]) == 0
        raise NonFiniteError(nonfinite_message(0, overflow))
    header = torch.where(ok, torch.cat([mn, mx]), torch.full_like(zero, float("nan")))
    out[:HEADER_BYTES] = header.view(torch.uint8)
    out[HEADER_BYTES + numel :] = 0
    return out


def quantise(x: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int,
             decompressed: torch.Tensor | None = None) -> torch.Tensor:
    """``fallback.quantise``; with ``decompressed`` (one chunk) also the decompressed values of the
    elements i of [begin, end) with i < ``decompressed.numel()`` written there."""
    fallback.quantise(x, n_chunks, out, begin, end)
    if decompressed is not None:
        stop = min(end, x.numel(), decompressed.numel())
        if stop > begin:
            scale, _, lower = fallback._slot_params(out)
            values = (out[HEADER_BYTES + begin : HEADER_BYTES + stop].float() + lower).div(scale)
            decompressed.view(-1)[begin:stop].copy_(values)
    return out
