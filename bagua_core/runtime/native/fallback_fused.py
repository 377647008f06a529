"""Pure-torch versions of the fused kernels: the plain fallback kernels composed, step by step.

Each is the definition its native (C, CUDA) counterpart must equal bit for bit: the fused kernels
only save passes over memory. Operands of arithmetic are fp32 tensors (no Python-scalar divisors,
see ``bagua_core.runtime.native.fallback``), so CPU and CUDA give the same values.

Example::

    >>> stats = new_stats(torch.device("cpu"))
    >>> z = lpd_diff(x, w, left, right, torch.empty_like(x), stats)     # stats: min, max, NaN seen of z
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_core.runtime.native import fallback
from bagua_core.runtime.native.layout import HEADER_BYTES, NonFiniteError, compressed_size, nonfinite_message

__all__ = [
    "adam_update", "decompress_sum", "headers_from_stats", "lpd_diff", "lpd_update", "merge_stats", "new_stats", "quantise",
]


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


def lpd_diff(x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor, z: torch.Tensor,
             stats: torch.Tensor | None = None) -> torch.Tensor:
    """``z = x + left/3 + right/3 - w * (5/3)`` in that order, fp32 (the divisor 3 and the factor
    ``float(5/3)`` as tensors), and the stats of z merged into ``stats``."""
    three = torch.full_like(x, 3.0)
    five_thirds = torch.full_like(x, 5 / 3)
    z.copy_(((x + left / three) + right / three) - w * five_thirds)
    if stats is not None:
        merge_stats(stats, z)
    return z


def lpd_update(q_left: torch.Tensor, q_right: torch.Tensor, q_own: torch.Tensor, w: torch.Tensor, left: torch.Tensor,
               right: torch.Tensor, x: torch.Tensor | None, begin: int, end: int) -> None:
    """On the elements [begin, end): ``left += D(q_left)``, ``right += D(q_right)``, ``w += D(q_own)``, ``x = w``."""
    if q_own.numel() != compressed_size(w.numel(), 1):
        raise ValueError("lpd_update: buffer size does not match compressed_size(numel, 1)")
    stop = min(end, w.numel())
    if stop <= begin:
        return
    for buf, target in ((q_left, left), (q_right, right), (q_own, w)):
        fallback.decompress(buf, 1, target, True, begin, stop)
    if x is not None:
        x.view(-1)[begin:stop].copy_(w.view(-1)[begin:stop])


def adam_update(param: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step_size: float,
                bias_correction2_sqrt: float, eps: float) -> None:
    """``param += (step_size * exp_avg) / (sqrt(exp_avg_sq) / c + eps)``, one rounding per operation in
    that order (torch's CPU ``addcdiv_`` order), the square root correctly rounded (through float64), the
    scalars as tensors (so CUDA neither multiplies by a reciprocal nor fuses a multiply-add). Other
    float dtypes are computed in fp32 and rounded once."""
    root = exp_avg_sq.double().sqrt().float()

    def scalar(value: float) -> torch.Tensor:
        return torch.full_like(root, value)

    denom = root.div(scalar(bias_correction2_sqrt)).add(scalar(eps))
    update = exp_avg.float().mul(scalar(step_size)).div(denom)
    if param.dtype == torch.float32:
        param.add_(update)
    else:
        param.copy_(param.float().add(update))
