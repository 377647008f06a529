"""MinMaxUInt8 compression kernels and the NCCL communicator: the Python face of ``native/``.

Compression of a chunk x, in fp32 (fp16/bf16 inputs are converted first; eps = 1e-7, rint = round
half to even): ``scale = 255 / (max - min + eps)``, ``upper = rint(max * scale)``,
``lower = upper - 255``, ``q = uint8(clamp(min(rint(x * scale), upper) - lower, 0, 255))``;
decompression ``x' = (q + lower) / scale``. The buffer layout is in ``bagua_core.runtime.native.layout``.

NaN/Inf: a chunk holding NaN/Inf (or values so large that ``x * scale`` overflows) raises
``NonFiniteError`` (a ValueError) with ``nonfinite="raise"`` (default); with ``"propagate"`` it is
stored as min = max = NaN with a zero payload and decompresses to NaN (what AMP's GradScaler wants).

``backend`` is "native" or "python" (policy ``BAGUA_NATIVE=auto|native|python``); CUDA tensors use
the CUDA kernels when ``has_cuda_kernels``, else the torch formula. ``has_nccl`` and
``nccl_unavailable_reason`` report the NCCL communicator (``bagua_core.runtime.native.nccl``).

Example::

    >>> import torch, bagua_core.runtime.native as native
    >>> grad = torch.randn(1000)
    >>> buf = native.compress_minmax_uint8(grad, n_chunks=4)       # uint8, compressed_size(1000, 4) bytes
    >>> approx = native.decompress_minmax_uint8(buf, 4, torch.empty(1000))
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import torch

from bagua_core.runtime.native import cuda as _cuda
from bagua_core.runtime.native import fallback as _fallback
from bagua_core.runtime.native import fallback_fused as _fallback_fused
from bagua_core.runtime.native.layout import (
    NonFiniteError,
    check_buffer,
    check_input,
    check_nonfinite,
    check_output,
    compressed_size,
)
from bagua_core.runtime.native.policy import cpu_backend, read_policy
from bagua_core.runtime.native.fused import (
    adam_update,
    lpd_difference,
    lpd_update,
    minmax_stats,
    minmax_uint8_headers_from_stats,
)

__all__ = [
    "NonFiniteError",
    "adam_update",
    "backend",
    "compress_minmax_uint8",
    "compress_minmax_uint8_headers",
    "compressed_size",
    "cuda_unavailable_reason",
    "decompress_average_minmax_uint8",
    "decompress_minmax_uint8",
    "has_cuda_kernels",
    "has_nccl",
    "lpd_difference",
    "lpd_update",
    "minmax_stats",
    "minmax_uint8_headers_from_stats",
    "native_policy",
    "native_unavailable_reason",
    "nccl_unavailable_reason",
    "quantise_minmax_uint8",
]

native_policy: str = read_policy()  # not "policy": that name is the submodule
_cpu, native_unavailable_reason = cpu_backend()
backend: str = "native" if _cpu is not None else "python"


def _impl(device: torch.device) -> ModuleType:
    if backend == "native":
        if device.type == "cpu":
            return _cpu  # type: ignore[return-value]
        if device.type == "cuda" and _cuda.available():
            return _cuda
    return _fallback


def compress_minmax_uint8(
    x: torch.Tensor, n_chunks: int = 1, *, nonfinite: str = "raise", out: torch.Tensor | None = None
) -> torch.Tensor:
    """Compresses the contiguous fp32/fp16/bf16 tensor ``x`` split into ``n_chunks`` chunks.

    Returns (or fills ``out``) a uint8 tensor of ``compressed_size(x.numel(), n_chunks)`` bytes on
    ``x.device``; chunk ``j`` is slot ``j`` (see ``bagua_core.runtime.native.layout``).
    """
    check_input(x)
    compressed_size(x.numel(), n_chunks)  # validates n_chunks
    check_nonfinite(nonfinite)
    if out is not None:
        check_buffer(out, x.numel(), n_chunks, "out")
        if out.device != x.device:
            raise ValueError(f"out is on {out.device} but x is on {x.device}")
    return _impl(x.device).compress(x, n_chunks, nonfinite, out)


def _check_range(begin: int, end: int | None) -> bool:
    """Validates a chunk-local element range; True when it is not the whole chunk."""
    if isinstance(begin, bool) or not isinstance(begin, int) or begin < 0:
        raise ValueError(f"begin must be an integer >= 0, got {begin!r}")
    if end is not None and (isinstance(end, bool) or not isinstance(end, int) or end < begin):
        raise ValueError(f"end must be None or an integer >= begin ({begin}), got {end!r}")
    return begin > 0 or end is not None


def _ranged_impl(device: torch.device) -> ModuleType:
    impl = _impl(device)
    return _fallback if impl is _cuda else impl  # the CUDA kernels work on whole chunks only


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
    _check_range(begin, end)
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
    if _check_range(begin, end):
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
    ranged = _check_range(begin, end)
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


def __getattr__(name: str) -> object:
    # capabilities that need CUDA/NCCL probing are computed on first access
    if name == "has_cuda_kernels":
        return backend == "native" and _cuda.available()
    if name == "cuda_unavailable_reason":
        return native_unavailable_reason if backend != "native" else _cuda.unavailable_reason()
    if name in ("has_nccl", "nccl_unavailable_reason"):
        from bagua_core.runtime.native import nccl_lib

        return nccl_lib.available() if name == "has_nccl" else nccl_lib.unavailable_reason()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
