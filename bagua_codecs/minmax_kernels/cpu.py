"""MinMaxUInt8's C kernels (``native/minmax_uint8*.c`` in the CPU library ``bagua_core._native_cpu``, cffi
API mode) behind :mod:`bagua_codecs.minmax_kernels`.

Inputs of fp16/bf16 are converted to fp32 by torch first; fp16/bf16 outputs are written through an
fp32 buffer, exactly as the fallback rounds them, so results are bit-identical to it. The C calls
release the GIL. Importing this module raises ImportError where the library was not built.

Example::

    >>> buf = compress(torch.randn(1000), 4, "raise")
    >>> decompress(buf, 4, torch.empty(1000), accumulate=False).shape
    torch.Size([1000])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_codecs.minmax_kernels.layout import NonFiniteError, compressed_size, nonfinite_message
from bagua_codecs.minmax_kernels.layout import chunk_numel as compressed_chunk
from bagua_core.kernels import check_status, cpu_library, get_threads, set_threads

__all__ = [
    "compress", "decompress", "decompress_sum", "ffi", "get_threads", "headers", "headers_from_stats", "lib",
    "quantise", "set_threads",
]

ffi, lib = cpu_library().ffi, cpu_library().lib  # ImportError where it was not built


def _check(rc: int, what: str) -> None:
    if rc == lib.BAGUA_MINMAX_ERR_NONFINITE:
        raise NonFiniteError(nonfinite_message(None, overflow=False))
    if rc == lib.BAGUA_MINMAX_ERR_OVERFLOW:
        raise NonFiniteError(nonfinite_message(None, overflow=True))
    check_status(rc, what)


def _float_ptr(t: torch.Tensor):  # noqa: ANN202
    return ffi.cast("float *", t.data_ptr())


def _byte_ptr(t: torch.Tensor):  # noqa: ANN202
    return ffi.cast("uint8_t *", t.data_ptr())


def compress(x: torch.Tensor, n_chunks: int, nonfinite: str, out: torch.Tensor | None = None) -> torch.Tensor:
    """The compressed uint8 buffer of ``x`` (fp32 arithmetic)."""
    xf = x if x.dtype == torch.float32 else x.float()
    if out is None:
        out = torch.empty(compressed_size(x.numel(), n_chunks), dtype=torch.uint8)
    rc = lib.bagua_minmax_compress_f32(
        _float_ptr(xf), xf.numel(), n_chunks, _byte_ptr(out), out.numel(), int(nonfinite == "raise")
    )
    _check(rc, "compress_minmax_uint8")
    return out


def headers(x: torch.Tensor, n_chunks: int, nonfinite: str, out: torch.Tensor) -> torch.Tensor:
    """The slot headers (min/max) and zero padding of ``compress`` into ``out``; payload untouched."""
    xf = x if x.dtype == torch.float32 else x.float()
    rc = lib.bagua_minmax_headers_f32(
        _float_ptr(xf), xf.numel(), n_chunks, _byte_ptr(out), out.numel(), int(nonfinite == "raise")
    )
    _check(rc, "compress_minmax_uint8_headers")
    return out


def headers_from_stats(stats: torch.Tensor, numel: int, out: torch.Tensor, nonfinite: str) -> torch.Tensor:
    """The one-chunk header and padding of ``numel`` values whose min/max/NaN flag are ``stats``."""
    rc = lib.bagua_minmax_headers_from_stats_f32(_float_ptr(stats), numel, _byte_ptr(out), out.numel(),
                                                 int(nonfinite == "raise"))
    _check(rc, "minmax_uint8_headers_from_stats")
    return out


def quantise(x: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int,
             decompressed: torch.Tensor | None = None) -> torch.Tensor:
    """The payload of the chunk-local elements [begin, end) of every chunk, from ``out``'s headers;
    with ``decompressed`` (fp32, one chunk) also the decompressed values of those elements."""
    xf = x if x.dtype == torch.float32 else x.float()
    if decompressed is not None:
        rc = lib.bagua_minmax_quantise_decompress_f32(_float_ptr(xf), xf.numel(), _byte_ptr(out), out.numel(),
                                                      begin, end, _float_ptr(decompressed), decompressed.numel())
    else:
        rc = lib.bagua_minmax_quantise_f32(_float_ptr(xf), xf.numel(), n_chunks, _byte_ptr(out), out.numel(),
                                           begin, end)
    _check(rc, "quantise_minmax_uint8")
    return out


def decompress(
    buf: torch.Tensor, n_chunks: int, out: torch.Tensor, accumulate: bool, begin: int = 0, end: int | None = None
) -> torch.Tensor:
    """``out = D(buf)`` or ``out += D(buf)`` in fp32 (only the chunk-local elements [begin, end))."""
    target = (
        out
        if out.dtype == torch.float32
        else (out.float() if accumulate or begin or end is not None else out.new_empty(out.shape, dtype=torch.float32))
    )
    rc = lib.bagua_minmax_decompress_range_f32(
        _byte_ptr(buf), buf.numel(), out.numel(), n_chunks, _float_ptr(target), int(accumulate),
        begin, compressed_chunk(out.numel(), n_chunks) if end is None else end,
    )
    _check(rc, "decompress_minmax_uint8")
    if target is not out:
        out.copy_(target)
    return out


def decompress_sum(
    bufs: Sequence[torch.Tensor], out: torch.Tensor, average: bool, begin: int = 0, end: int | None = None,
    stats: torch.Tensor | None = None,
) -> torch.Tensor:
    """``out = sum_k D(bufs[k])`` (or the mean) accumulated in fp32 (only ``out[begin:end]``); with
    ``stats`` (fp32 out only) the min/max/NaN flag of the values written are merged into it."""
    partial = begin or end is not None
    target = out if out.dtype == torch.float32 else (out.float() if partial else out.new_empty(out.shape, dtype=torch.float32))
    pointers = ffi.new("uint8_t *[]", [_byte_ptr(b) for b in bufs])
    rc = lib.bagua_minmax_decompress_sum_stats_f32(
        pointers, len(bufs), compressed_size(out.numel(), 1), out.numel(), _float_ptr(target), int(average),
        begin, out.numel() if end is None else end, ffi.NULL if stats is None else _float_ptr(stats),
    )
    _check(rc, "decompress_average_minmax_uint8")
    if target is not out:
        out.copy_(target)
    return out
