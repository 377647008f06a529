"""Pure-torch MinMaxUInt8 kernels: the reference, and the backend where nothing was compiled.

Same formula, layout and NaN rules as the native kernels (bit-identical bytes and values); every
step is one fp32 torch op with tensor operands, so CPU and CUDA give the same result (CUDA divides a
tensor by a CPU scalar through its reciprocal, hence no Python-scalar divisors here). Inputs are
converted to fp32 first; outputs of fp16/bf16 are rounded from the fp32 result.

Example::

    >>> x = torch.linspace(-1, 1, 10)
    >>> buf = compress(x, 2, "raise")
    >>> decompress(buf, 2, torch.empty(10), accumulate=False).sub(x).abs().max() < 2 / 255
    tensor(True)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_codecs.minmax_kernels.layout import (
    EPS,
    HEADER_BYTES,
    NonFiniteError,
    chunk_numel,
    compressed_size,
    nonfinite_message,
    slot_bytes,
)

__all__ = ["compress", "decompress", "decompress_sum", "headers", "minmax_params", "quantise"]


def minmax_params(mn: torch.Tensor, mx: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(scale, upper, lower, ok)`` of fp32 min/max tensors; ``ok`` is False where a chunk cannot be
    represented (NaN/Inf, or overflow of ``x * scale``)."""
    rng = (mx - mn) + torch.full_like(mn, EPS)
    scale = torch.full_like(mn, 255.0).div(rng)
    upper = torch.round(mx * scale)
    lower = upper - torch.full_like(mn, 255.0)
    lowest = torch.round(mn * scale)
    ok = torch.isfinite(mn) & torch.isfinite(mx)
    for t in (rng, upper, lowest, lower):
        ok &= torch.isfinite(t)
    return scale, upper, lower, ok


def compress(x: torch.Tensor, n_chunks: int, nonfinite: str, out: torch.Tensor | None = None) -> torch.Tensor:
    """The compressed uint8 buffer of ``x`` (see ``bagua_codecs.minmax_kernels.layout``)."""
    xf = x.reshape(-1).float()
    numel, m, slot = xf.numel(), chunk_numel(x.numel(), n_chunks), slot_bytes(x.numel(), n_chunks)
    if out is None:
        out = torch.empty(compressed_size(numel, n_chunks), dtype=torch.uint8, device=x.device)
    slots = out.view(n_chunks, slot)
    slots.zero_()
    if numel == 0:
        return out
    rows = -(-numel // m)  # chunks holding elements; pad the last one with its own last element
    padded = torch.cat([xf, xf[-1:].expand(rows * m - numel)]) if rows * m > numel else xf
    values = padded.view(rows, m)
    mn, mx = torch.aminmax(values, dim=1, keepdim=True)
    zero = torch.zeros_like(mn)
    mn, mx = mn + zero, mx + zero  # -0 -> +0, as the native kernels store it
    scale, upper, lower, ok = minmax_params(mn, mx)
    if nonfinite == "raise" and not bool(ok.all()):
        bad = int((~ok).nonzero()[0, 0])
        overflow = bool(torch.isfinite(mn[bad]) & torch.isfinite(mx[bad]))
        raise NonFiniteError(nonfinite_message(bad, overflow))
    q = torch.round(values * scale).minimum(upper).sub(lower).clamp(0.0, 255.0).to(torch.uint8)
    q = torch.where(ok, q, torch.zeros_like(q))
    q.view(-1)[numel:] = 0
    header = torch.where(ok, torch.cat([mn, mx], dim=1), torch.full_like(mn, float("nan")))
    slots[:rows, :HEADER_BYTES] = header.view(torch.uint8)
    slots[:rows, HEADER_BYTES : HEADER_BYTES + m] = q
    return out


def headers(x: torch.Tensor, n_chunks: int, nonfinite: str, out: torch.Tensor) -> torch.Tensor:
    """The slot headers and zero padding of :func:`compress` written into ``out``; payload untouched."""
    full = compress(x, n_chunks, nonfinite)
    m, slot = chunk_numel(x.numel(), n_chunks), slot_bytes(x.numel(), n_chunks)
    src, dst = full.view(n_chunks, slot), out.view(n_chunks, slot)
    dst[:, :HEADER_BYTES] = src[:, :HEADER_BYTES]
    for c in range(n_chunks):  # padding: past the chunk's last element
        dst[c, HEADER_BYTES + max(0, min(m, x.numel() - c * m)) :] = 0
    return out


def _chunk_segments(numel: int, n_chunks: int, begin: int, end: int | None):  # noqa: ANN202
    """``(c, start, stop)`` per chunk: the chunk-local elements [begin, end) clamped to the chunk."""
    m = chunk_numel(numel, n_chunks)
    end = m if end is None else end
    for c in range(n_chunks):
        length = max(0, min(m, numel - c * m))
        start, stop = min(begin, length), min(end, length)
        if stop > start:
            yield c, start, stop


def _slot_params(slot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(scale, upper, lower)`` of a slot's header (NaN for a NaN chunk)."""
    header = slot[:HEADER_BYTES].contiguous().view(torch.float32)
    scale, upper, lower, ok = minmax_params(header[:1], header[1:])
    nan = torch.full_like(scale, float("nan"))
    return torch.where(ok, scale, nan), torch.where(ok, upper, nan), torch.where(ok, lower, nan)


def quantise(x: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int) -> torch.Tensor:
    """The payload of the chunk-local elements [begin, end) of every chunk, from ``out``'s headers."""
    xf = x.reshape(-1).float()
    m, slot = chunk_numel(x.numel(), n_chunks), slot_bytes(x.numel(), n_chunks)
    slots = out.view(n_chunks, slot)
    for c, start, stop in _chunk_segments(x.numel(), n_chunks, begin, end):
        scale, upper, lower = _slot_params(slots[c])
        values = xf[c * m + start : c * m + stop]
        q = torch.round(values * scale).minimum(upper).sub(lower).clamp(0.0, 255.0)
        q = torch.where(torch.isnan(scale), torch.zeros_like(q), q).to(torch.uint8)
        slots[c, HEADER_BYTES + start : HEADER_BYTES + stop] = q
    return out


def _decompressed_rows(buf: torch.Tensor, numel: int, n_chunks: int) -> torch.Tensor:
    """fp32 values of the first ``numel`` elements of ``buf``."""
    m, slot = chunk_numel(numel, n_chunks), slot_bytes(numel, n_chunks)
    rows = -(-numel // m)
    slots = buf.view(n_chunks, slot)[:rows]
    header = slots[:, :HEADER_BYTES].contiguous().view(torch.float32)
    scale, _, lower, ok = minmax_params(header[:, :1], header[:, 1:])
    nan = torch.full_like(scale, float("nan"))
    scale, lower = torch.where(ok, scale, nan), torch.where(ok, lower, nan)
    values = (slots[:, HEADER_BYTES : HEADER_BYTES + m].float() + lower).div(scale)
    return values.view(-1)[:numel]


def decompress(
    buf: torch.Tensor, n_chunks: int, out: torch.Tensor, accumulate: bool, begin: int = 0, end: int | None = None
) -> torch.Tensor:
    """``out = D(buf)``, or ``out += D(buf)`` computed in fp32, then rounded to ``out.dtype`` (only the
    chunk-local elements [begin, end) of every chunk when given)."""
    if out.numel() == 0:
        return out
    if begin or end is not None:
        m, slot = chunk_numel(out.numel(), n_chunks), slot_bytes(out.numel(), n_chunks)
        slots, flat = buf.view(n_chunks, slot), out.view(-1)
        for c, start, stop in _chunk_segments(out.numel(), n_chunks, begin, end):
            scale, _, lower = _slot_params(slots[c])
            values = (slots[c, HEADER_BYTES + start : HEADER_BYTES + stop].float() + lower).div(scale)
            target = flat[c * m + start : c * m + stop]
            target.copy_(target.float() + values if accumulate else values)
        return out
    values = _decompressed_rows(buf, out.numel(), n_chunks)
    flat = out.view(-1)
    flat.copy_(flat.float() + values if accumulate else values)
    return out


def decompress_sum(
    bufs: Sequence[torch.Tensor], out: torch.Tensor, average: bool, begin: int = 0, end: int | None = None
) -> torch.Tensor:
    """``out = sum_k D(bufs[k])`` (or the mean), accumulated in fp32 in order k = 0, 1, ... (only
    ``out[begin:end]`` when given)."""
    if out.numel() == 0:
        return out
    if begin or end is not None:
        stop = min(out.numel(), out.numel() if end is None else end)
        start = min(begin, stop)
        acc = None
        for buf in bufs:
            scale, _, lower = _slot_params(buf)
            values = (buf[HEADER_BYTES + start : HEADER_BYTES + stop].float() + lower).div(scale)
            acc = values if acc is None else acc + values
        if average:
            acc = acc.div(torch.full_like(acc, float(len(bufs))))
        out.view(-1)[start:stop].copy_(acc)
        return out
    acc = _decompressed_rows(bufs[0], out.numel(), 1)
    for buf in bufs[1:]:
        acc = acc + _decompressed_rows(buf, out.numel(), 1)
    if average:
        acc = acc.div(torch.full_like(acc, float(len(bufs))))
    out.view(-1).copy_(acc)
    return out
