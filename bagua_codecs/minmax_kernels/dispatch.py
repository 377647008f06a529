"""MinMaxUInt8's public kernel functions: argument checks, then the C kernels, the CUDA kernels or the
torch fallback, whichever serves the tensors' device under the ``BAGUA_NATIVE`` policy.

CPU tensors take the C kernels when ``bagua_core.runtime.native.backend == "native"``; CUDA tensors the
CUDA kernels when they are loaded as well (whole chunks only: ranges take the fallback); everything else
the fallback. All give the same bits.

Example::

    >>> buf = compress_minmax_uint8(grad, n_chunks=4)       # uint8, compressed_size(grad.numel(), 4) bytes
    >>> approx = decompress_minmax_uint8(buf, 4, torch.empty_like(grad))
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import torch

from bagua_codecs.minmax_kernels import cuda as _cuda
from bagua_codecs.minmax_kernels import fallback as _fallback
from bagua_codecs.minmax_kernels import fallback_fused as _fallback_fused
from bagua_codecs.minmax_kernels.layout import check_buffer, compressed_size
from bagua_core.kernels import (
    check_f32,
    check_input,
    check_nonfinite,
    check_output,
    check_range,
    cpu_kernels_take,
    cuda_available,
    native_backend,
)

try:
    from bagua_codecs.minmax_kernels import cpu as _cpu
except ImportError:  # not built: the policy reports the fallback then
    _cpu = None

__all__ = [
    "compress_minmax_uint8",
    "compress_minmax_uint8_headers",
    "decompress_average_minmax_uint8",
    "decompress_minmax_uint8",
    "minmax_stats",
    "minmax_uint8_headers_from_stats",
    "quantise_minmax_uint8",
]


def _impl(device: torch.device) -> ModuleType:
    if native_backend() == "native":
        if device.type == "cpu" and _cpu is not None:
            return _cpu
        if device.type == "cuda" and cuda_available():
            return _cuda
    return _fallback


def _ranged_impl(device: torch.device) -> ModuleType:
    impl = _impl(device)
    return _fallback if impl is _cuda else impl  # the CUDA kernels work on whole chunks only


def compress_minmax_uint8(
    x: torch.Tensor, n_chunks: int = 1, *, nonfinite: str = "raise", out: torch.Tensor | None = None
) -> torch.Tensor:
    """Compresses the contiguous fp32/fp16/bf16 tensor ``x`` split into ``n_chunks`` chunks.

    Returns (or fills ``out``) a uint8 tensor of ``compressed_size(x.numel(), n_chunks)`` bytes on
    ``x.device``; chunk ``j`` is slot ``j`` (see ``bagua_codecs.minmax_kernels.layout``).
    """
    check_input(x)
    compressed_size(x.numel(), n_chunks)  # validates n_chunks
    check_nonfinite(nonfinite)
    if out is not None:
        check_buffer(out, x.numel(), n_chunks, "out")
        if out.device != x.device:
            raise ValueError(f"out is on {out.device} but x is on {x.device}")
    return _impl(x.device).compress(x, n_chunks, nonfinite, out)


def compress_minmax_uint8_headers(
    x: torch.Tensor, n_chunks: int, out: torch.Tensor, *, nonfinite: str = "raise"
) -> torch.Tensor:
    """Writes only the slot headers (each chunk's fp32 min/max) and zero padding of
    ``compress_minmax_uint8(x, n_chunks)`` into ``out``; the payload bytes are left as they are.

    Then :func:`quantise_minmax_uint8` over segments that cover every chunk fills in exactly the
    payload of ``compress_minmax_uint8`` (so a chunk can be sent in segments). Returns ``out``.
    """
    check_input(x)
    check_nonfinite(nonfinite)
    check_buffer(out, x.numel(), n_chunks, "out")
    if out.device != x.device:
        raise ValueError(f"out is on {out.device} but x is on {x.device}")
    return _ranged_impl(x.device).headers(x, n_chunks, nonfinite, out)


def quantise_minmax_uint8(x: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int, *,
                          decompressed: torch.Tensor | None = None) -> torch.Tensor:
    """Writes the uint8 payload of the chunk-local elements [begin, end) of every chunk of ``x``
    into ``out``, with the min/max already in ``out``'s headers (see
    :func:`compress_minmax_uint8_headers`); NaN chunks get zeros. Returns ``out``.

    ``decompressed`` (one chunk only, fp32): in the same pass, write the values that
    ``decompress_minmax_uint8`` of the finished buffer gives for those elements into it (only the
    elements i < ``decompressed.numel()``), so the own chunk need not be decompressed again.

    Example::

        >>> compress_minmax_uint8_headers(x, 2, buf)
        >>> for begin in range(0, chunk_numel(x.numel(), 2), 4096):
        ...     quantise_minmax_uint8(x, 2, buf, begin, begin + 4096)   # buf == compress_minmax_uint8(x, 2)
    """
    check_input(x)
    check_buffer(out, x.numel(), n_chunks, "out")
    check_range(begin, end)
    if end is None:
        raise ValueError("end must be an integer")
    if out.device != x.device:
        raise ValueError(f"out is on {out.device} but x is on {x.device}")
    if decompressed is None:
        return _ranged_impl(x.device).quantise(x, n_chunks, out, begin, end)
    if n_chunks != 1 or x.dtype != torch.float32:
        raise ValueError("decompressed= needs one chunk of float32 values")
    check_output(decompressed, x.device, "decompressed")
    if decompressed.dtype != torch.float32:
        raise ValueError(f"decompressed must be float32, got {decompressed.dtype}")
    impl = _ranged_impl(x.device)
    return (impl if impl is _cpu else _fallback_fused).quantise(x, 1, out, begin, end, decompressed)


def decompress_minmax_uint8(
    buf: torch.Tensor, n_chunks: int, out: torch.Tensor, *, accumulate: bool = False, begin: int = 0,
    end: int | None = None,
) -> torch.Tensor:
    """Writes the values of ``buf`` (``out.numel()`` elements in ``n_chunks`` chunks) into ``out``.

    ``accumulate=True`` computes ``out += D(buf)`` instead; both in fp32, then rounded to
    ``out.dtype`` (fp32, fp16 or bf16). ``begin``/``end``: only the chunk-local elements
    [begin, end) of every chunk (the others are not touched). Returns ``out``.
    """
    check_output(out)
    check_buffer(buf, out.numel(), n_chunks)
    if buf.device != out.device:
        raise ValueError(f"buf is on {buf.device} but out is on {out.device}")
    if check_range(begin, end):
        return _ranged_impl(out.device).decompress(buf, n_chunks, out, bool(accumulate), begin, end)
    return _impl(out.device).decompress(buf, n_chunks, out, bool(accumulate))


def decompress_average_minmax_uint8(
    bufs: Sequence[torch.Tensor] | torch.Tensor, n: int, out: torch.Tensor, average: bool = True, *,
    begin: int = 0, end: int | None = None, stats: torch.Tensor | None = None,
) -> torch.Tensor:
    """``out = mean_k D(bufs[k])`` (or the sum when ``average=False``) over ``n`` compressed chunks.

    ``bufs`` is a sequence of ``n`` one-chunk buffers of ``compressed_size(out.numel(), 1)`` bytes,
    or one uint8 tensor holding them back to back (an alltoall receive buffer of a
    ``compress_minmax_uint8(x, n)`` with ``x.numel() == n * out.numel()``). Accumulates in fp32 in
    order k = 0, 1, ..., divides by ``n``, then rounds to ``out.dtype``. ``begin``/``end``: only
    ``out[begin:end]`` (the rest is not touched). ``stats`` (from :func:`minmax_stats`, fp32 CPU
    ``out`` only): the min/max/NaN flag of the values written are merged into it in the same pass,
    for :func:`minmax_uint8_headers_from_stats`. Returns ``out``.
    """
    check_output(out)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    size = compressed_size(out.numel(), 1)
    if isinstance(bufs, torch.Tensor):
        check_buffer(bufs, n * out.numel(), n, "bufs")
        parts: Sequence[torch.Tensor] = list(bufs.view(n, size).unbind(0))
    else:
        parts = list(bufs)
        if len(parts) != n:
            raise ValueError(f"got {len(parts)} buffers but n = {n}")
        for k, part in enumerate(parts):
            check_buffer(part, out.numel(), 1, f"bufs[{k}]")
    for k, part in enumerate(parts):
        if part.device != out.device:
            raise ValueError(f"bufs[{k}] is on {part.device} but out is on {out.device}")
    ranged = check_range(begin, end)
    if stats is not None:
        if out.dtype != torch.float32 or out.device.type != "cpu" or stats.device.type != "cpu":
            raise ValueError("stats= needs a float32 CPU out and CPU stats")
        impl = _ranged_impl(out.device)
        return (impl if impl is _cpu else _fallback_fused).decompress_sum(parts, out, bool(average), begin, end, stats)
    if ranged:
        return _ranged_impl(out.device).decompress_sum(parts, out, bool(average), begin, end)
    impl = _impl(out.device)
    if impl is _cuda and isinstance(bufs, torch.Tensor):
        return _cuda.decompress_sum(bufs, out, bool(average))
    return impl.decompress_sum(parts, out, bool(average))


def minmax_stats(device: torch.device | str = "cpu") -> torch.Tensor:
    """A fresh ``{min, max, NaN seen}``: ``tensor([inf, -inf, 0.])`` (fp32) on ``device``; kernels that
    write values merge theirs into it (``decompress_average_minmax_uint8(..., stats=)``)."""
    return _fallback_fused.new_stats(torch.device(device))


def minmax_uint8_headers_from_stats(stats: torch.Tensor, numel: int, out: torch.Tensor, *,
                                    nonfinite: str = "raise") -> torch.Tensor:
    """Writes the header (fp32 min/max) and zero padding of the one-chunk buffer ``out`` of ``numel``
    values whose stats were merged over all of them: the bytes ``compress_minmax_uint8_headers(x, 1, out)``
    writes, without a second pass over x. Non-finite values raise ``NonFiniteError``
    (``nonfinite="raise"``) or make a NaN chunk."""
    check_f32("stats", stats, 3)
    check_nonfinite(nonfinite)
    check_buffer(out, numel, 1, "out")
    impl = _cpu if cpu_kernels_take(stats, out) else _fallback_fused
    return impl.headers_from_stats(stats, numel, out, nonfinite)
