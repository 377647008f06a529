"""Pure-torch definitions of low_precision_decentralized's fused steps: the reference the C and CUDA
kernels must equal bit for bit, and the backend where they do not serve.

Operands of arithmetic are fp32 tensors (no Python-scalar divisors), so CPU and CUDA give the same
values. The update reads one-chunk MinMaxUInt8 buffers with the codec's torch reference
(``bagua_codecs.decompress_minmax_uint8_reference``).

Example::

    >>> stats = minmax_stats()
    >>> z = lpd_diff(x, w, left, right, torch.empty_like(x), stats)     # stats: min, max, NaN seen of z
"""

from __future__ import annotations

import torch

from bagua_codecs import decompress_minmax_uint8_reference, merge_minmax_stats, minmax_uint8_compressed_size

__all__ = ["lpd_diff", "lpd_update"]


def lpd_diff(x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor, z: torch.Tensor,
             stats: torch.Tensor | None = None) -> torch.Tensor:
    """``z = x + left/3 + right/3 - w * (5/3)`` in that order, fp32 (the divisor 3 and the factor
    ``float(5/3)`` as tensors), and the stats of z merged into ``stats``."""
    three = torch.full_like(x, 3.0)
    five_thirds = torch.full_like(x, 5 / 3)
    z.copy_(((x + left / three) + right / three) - w * five_thirds)
    if stats is not None:
        merge_minmax_stats(stats, z)
    return z


def lpd_update(q_left: torch.Tensor, q_right: torch.Tensor, q_own: torch.Tensor, w: torch.Tensor, left: torch.Tensor,
               right: torch.Tensor, x: torch.Tensor | None, begin: int, end: int) -> None:
    """On the elements [begin, end): ``left += D(q_left)``, ``right += D(q_right)``, ``w += D(q_own)``, ``x = w``."""
    if q_own.numel() != minmax_uint8_compressed_size(w.numel(), 1):
        raise ValueError("lpd_update: buffer size does not match compressed_size(numel, 1)")
    stop = min(end, w.numel())
    if stop <= begin:
        return
    for buf, target in ((q_left, left), (q_right, right), (q_own, w)):
        decompress_minmax_uint8_reference(buf, 1, target, True, begin, stop)
    if x is not None:
        x.view(-1)[begin:stop].copy_(w.view(-1)[begin:stop])
