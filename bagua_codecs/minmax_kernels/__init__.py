"""MinMaxUInt8's kernels: the compression of ``bagua_codecs.minmax.MinMaxUInt8Codec``, plain and fused.

Compression of a chunk x, in fp32 (fp16/bf16 inputs are converted first; eps = 1e-7, rint = round
half to even): ``scale = 255 / (max - min + eps)``, ``upper = rint(max * scale)``,
``lower = upper - 255``, ``q = uint8(clamp(min(rint(x * scale), upper) - lower, 0, 255))``;
decompression ``x' = (q + lower) / scale``. The buffer layout is in :mod:`.layout`.

NaN/Inf: a chunk holding NaN/Inf (or values so large that ``x * scale`` overflows) raises
``NonFiniteError`` (a ValueError) with ``nonfinite="raise"`` (default); with ``"propagate"`` it is
stored as min = max = NaN with a zero payload and decompresses to NaN (what AMP's GradScaler wants).

Fused (one pass over memory where composing the plain kernels takes two, bit-identical to that
composition): ``minmax_stats()`` starts the running ``{min, max, NaN seen}`` of values a kernel writes,
``decompress_average_minmax_uint8(..., stats=)`` fills it and ``minmax_uint8_headers_from_stats`` turns it
into the header ``compress_minmax_uint8_headers`` would compute; ``quantise_minmax_uint8(..., decompressed=)``
decodes the chunk while it encodes it.

Modules: :mod:`.dispatch` (the functions below: checks, then the backend), :mod:`.cpu` (the C kernels of
``native/minmax_uint8*.c``), :mod:`.cuda` (``native/minmax_uint8_cuda.cu``), :mod:`.fallback` and
:mod:`.fallback_fused` (torch: the reference, and the backend where nothing was compiled). Which backend
serves is ``bagua_core.runtime.native``'s policy (``BAGUA_NATIVE``).

Example::

    >>> from bagua_codecs import minmax_kernels as minmax
    >>> grad = torch.randn(1000)
    >>> buf = minmax.compress_minmax_uint8(grad, n_chunks=4)       # uint8, compressed_size(1000, 4) bytes
    >>> approx = minmax.decompress_minmax_uint8(buf, 4, torch.empty(1000))
"""

from __future__ import annotations

from bagua_codecs.minmax_kernels.dispatch import (
    compress_minmax_uint8,
    compress_minmax_uint8_headers,
    decompress_average_minmax_uint8,
    decompress_minmax_uint8,
    minmax_stats,
    minmax_uint8_headers_from_stats,
    quantise_minmax_uint8,
)
from bagua_codecs.minmax_kernels.layout import EPS, HEADER_BYTES, NonFiniteError, chunk_numel, compressed_size

__all__ = [
    "EPS",
    "HEADER_BYTES",
    "NonFiniteError",
    "chunk_numel",
    "compress_minmax_uint8",
    "compress_minmax_uint8_headers",
    "compressed_size",
    "decompress_average_minmax_uint8",
    "decompress_minmax_uint8",
    "minmax_stats",
    "minmax_uint8_headers_from_stats",
    "quantise_minmax_uint8",
]
