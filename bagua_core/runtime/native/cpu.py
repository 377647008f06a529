"""The compiled CPU kernels (``bagua_core._native_minmax``, cffi API mode) behind the public API.

Inputs of fp16/bf16 are converted to fp32 by torch first; fp16/bf16 outputs are written through an
fp32 buffer, exactly as the fallback rounds them, so results are bit-identical to it. The C calls
release the GIL.

Example::

    >>> buf = compress(torch.randn(1000), 4, "raise")
    >>> decompress(buf, 4, torch.empty(1000), accumulate=False).shape
    torch.Size([1000])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_core._native_minmax import ffi, lib
from bagua_core.runtime.native.layout import NonFiniteError, compressed_size, nonfinite_message
from bagua_core.runtime.native.layout import chunk_numel as compressed_chunk

__all__ = [
    "adam_update", "compress", "decompress", "decompress_sum", "get_threads", "headers", "headers_from_stats", "lib", "lpd_diff",
    "lpd_update", "quantise", "set_threads",
]


def _check(rc: int, what: str) -> None:
    if rc == lib.BAGUA_MINMAX_OK:
        return
    if rc == lib.BAGUA_MINMAX_ERR_NONFINITE:
        raise NonFiniteError(nonfinite_message(None, overflow=False))
    if rc == lib.BAGUA_MINMAX_ERR_OVERFLOW:
        raise NonFiniteError(nonfinite_message(None, overflow=True))
    if rc == lib.BAGUA_MINMAX_ERR_SIZE:
        raise ValueError(f"{what}: buffer size does not match compressed_size(numel, n_chunks)")
    raise ValueError(f"{what}: invalid argument (native error code {rc})")


def _float_ptr(t: torch.Tensor):
    return ffi.cast("float *", t.data_ptr())


def _byte_ptr(t: torch.Tensor):
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


def lpd_diff(x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor, z: torch.Tensor,
             stats: torch.Tensor) -> torch.Tensor:
    """``z = x + left/3 + right/3 - (5/3) w`` in torch's fp32 order, merging the min/max/NaN flag of z into ``stats``."""
    rc = lib.bagua_lpd_diff_f32(_float_ptr(x), _float_ptr(w), _float_ptr(left), _float_ptr(right), x.numel(),
                                _float_ptr(z), _float_ptr(stats))
    _check(rc, "lpd_difference")
    return z


def lpd_update(q_left: torch.Tensor, q_right: torch.Tensor, q_own: torch.Tensor, w: torch.Tensor, left: torch.Tensor,
               right: torch.Tensor, x: torch.Tensor | None, begin: int, end: int) -> None:
    """``left += D(q_left)``, ``right += D(q_right)``, ``w += D(q_own)``, ``x = w`` on the elements [begin, end)."""
    rc = lib.bagua_lpd_update_f32(_byte_ptr(q_left), _byte_ptr(q_right), _byte_ptr(q_own), q_own.numel(), w.numel(),
                                  _float_ptr(w), _float_ptr(left), _float_ptr(right),
                                  ffi.NULL if x is None else _float_ptr(x), begin, end)
    _check(rc, "lpd_update")


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


def set_threads(n_threads: int) -> None:
    """Lets the kernels split large tensors over ``n_threads`` threads (1 = the calling thread)."""
    if lib.bagua_minmax_set_threads(n_threads) != lib.BAGUA_MINMAX_OK:
        raise ValueError(f"threads must be an integer in 1..64, got {n_threads!r}")


def get_threads() -> int:
    """The number of threads the kernels may use."""
    return lib.bagua_minmax_get_threads()


def adam_update(param: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step_size: float,
                bias_correction2_sqrt: float, eps: float) -> None:
    """``param += step_size * exp_avg / (sqrt(exp_avg_sq) / c + eps)``, fp32, one pass."""
    rc = lib.bagua_adam_update_f32(_float_ptr(param), _float_ptr(exp_avg), _float_ptr(exp_avg_sq), param.numel(),
                                   step_size, bias_correction2_sqrt, eps)
    _check(rc, "adam_update")
