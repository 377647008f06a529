"""The compression steps the pipelined exchange calls, per segment: a pluggable codec.

A :class:`SegmentCodec` says how values become bytes in a slot layout
(``[header_bytes][bytes_per_element per element][padding]`` per chunk, every slot of a call the same
size, so a buffer splits evenly between ranks) and provides the steps of the exchanges in
``bagua_core.bucket_ops``: ``start`` (whatever must be known of a whole chunk before any segment is
encoded, such as its min/max), ``encode`` / ``decode`` of a segment, ``decode_mean`` (the average of
n decoded buffers, fp32) and ``lpd_update`` (the replica update of low_precision_decentralized).
The base class composes the fused steps from the plain ones; a codec overrides what it can do in
fewer passes. :data:`MINMAX_UINT8` (the native MinMaxUInt8 kernels, fused where it pays) is the
default and the fastest; :func:`segment_codec` gives the steps of any installed codec plugin
(``bagua_core.codecs``) by name, which is what an algorithm's ``compression="<name>"`` selects.

Example::

    >>> codec = MINMAX_UINT8
    >>> buf = torch.empty(codec.compressed_size(x.numel(), 1), dtype=torch.uint8)
    >>> codec.start(x, 1, buf)
    >>> codec.encode(x, 1, buf, 0, x.numel())       # buf == native.compress_minmax_uint8(x, 1)
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import torch

from bagua_core import env, native
from bagua_core.native.layout import check_nonfinite

__all__ = ["MINMAX_UINT8", "MinMaxUInt8Codec", "PluginSegmentCodec", "SegmentCodec", "segment_codec"]

Buffers = Sequence[torch.Tensor] | torch.Tensor


class SegmentCodec(abc.ABC):
    """Base of the codecs of the pipelined exchange: a codec implements the plain steps; the
    composite ones (``compress``, ``lpd_update``) have generic versions it may replace."""

    name = ""
    header_bytes = 0
    bytes_per_element = 1
    decodes_while_encoding = False
    """True when :meth:`encode` accepts ``decoded`` (else the exchange decodes the own chunk apart)."""

    @abc.abstractmethod
    def compressed_size(self, numel: int, n_chunks: int = 1) -> int:
        """Bytes of ``numel`` values in ``n_chunks`` equal slots."""

    def new_stats(self) -> torch.Tensor | None:
        """What :meth:`decode_mean` gathers for :meth:`start` (None: this codec gathers nothing)."""
        return None

    @abc.abstractmethod
    def start(self, values: torch.Tensor, n_chunks: int, out: torch.Tensor, stats: torch.Tensor | None = None) -> None:
        """Write what precedes the segments of every chunk of ``values`` into ``out`` (headers)."""

    @abc.abstractmethod
    def encode(self, values: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int,
               decoded: torch.Tensor | None = None) -> None:
        """Encode the chunk-local elements [begin, end) of every chunk; with ``decoded`` (one chunk, only
        passed when ``decodes_while_encoding``), also write their decoded values there (elements
        i < ``decoded.numel()``)."""

    @abc.abstractmethod
    def decode(self, buf: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int = 0, end: int | None = None,
               accumulate: bool = False) -> None:
        """``out = D(buf)`` (or ``out += D(buf)``) on the chunk-local elements [begin, end)."""

    @abc.abstractmethod
    def decode_mean(self, bufs: Buffers, n: int, out: torch.Tensor, average: bool, begin: int = 0,
                    end: int | None = None, stats: torch.Tensor | None = None) -> None:
        """``out[begin:end] = mean (or sum) of D(bufs[k])``, accumulated in fp32 in order k."""

    def compress(self, values: torch.Tensor, n_chunks: int, out: torch.Tensor) -> None:
        """The whole buffer at once (the exchange without pipelining)."""
        self.start(values, n_chunks, out)
        self.encode(values, n_chunks, out, 0, -(-values.numel() // n_chunks))

    def lpd_update(self, from_left: torch.Tensor, from_right: torch.Tensor, own: torch.Tensor, w: torch.Tensor,
                   left: torch.Tensor, right: torch.Tensor, x: torch.Tensor | None, begin: int, end: int) -> None:
        """On [begin, end): ``left += D(from_left)``, ``right += D(from_right)``, ``w += D(own)``, ``x = w``."""
        for buf, target in ((from_left, left), (from_right, right), (own, w)):
            self.decode(buf, 1, target, begin, end, accumulate=True)
        if x is not None:
            x[begin:end].copy_(w[begin:end])


class MinMaxUInt8Codec(SegmentCodec):
    """MinMaxUInt8 (``bagua_core.native``): 8-byte header (fp32 min/max), one byte per value. The min/max
    of an averaged chunk is gathered while it is written, the own chunk is decoded while it is
    encoded, and the low-precision decentralized update is one pass. ``nonfinite``: see
    ``native.compress_minmax_uint8``; None (the default) follows ``BAGUA_NONFINITE`` at each call."""

    name = "MinMaxUInt8"
    header_bytes = 8
    bytes_per_element = 1
    decodes_while_encoding = True

    def __init__(self, nonfinite: str | None = None) -> None:
        self._nonfinite = None if nonfinite is None else check_nonfinite(nonfinite)

    @property
    def nonfinite(self) -> str:
        return self._nonfinite or env.get_nonfinite_policy()

    def compressed_size(self, numel: int, n_chunks: int = 1) -> int:
        return native.compressed_size(numel, n_chunks)

    def new_stats(self) -> torch.Tensor:
        return native.minmax_stats()

    def start(self, values: torch.Tensor, n_chunks: int, out: torch.Tensor, stats: torch.Tensor | None = None) -> None:
        if stats is not None and n_chunks == 1:
            native.minmax_uint8_headers_from_stats(stats, values.numel(), out, nonfinite=self.nonfinite)
        else:
            native.compress_minmax_uint8_headers(values, n_chunks, out, nonfinite=self.nonfinite)

    def encode(self, values: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int,
               decoded: torch.Tensor | None = None) -> None:
        native.quantise_minmax_uint8(values, n_chunks, out, begin, end, decompressed=decoded)

    def decode(self, buf: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int = 0, end: int | None = None,
               accumulate: bool = False) -> None:
        native.decompress_minmax_uint8(buf, n_chunks, out, accumulate=accumulate, begin=begin, end=end)

    def decode_mean(self, bufs: Buffers, n: int, out: torch.Tensor, average: bool, begin: int = 0,
                    end: int | None = None, stats: torch.Tensor | None = None) -> None:
        native.decompress_average_minmax_uint8(bufs, n, out, average, begin=begin, end=end, stats=stats)

    def compress(self, values: torch.Tensor, n_chunks: int, out: torch.Tensor) -> None:
        native.compress_minmax_uint8(values, n_chunks, nonfinite=self.nonfinite, out=out)

    def lpd_update(self, from_left: torch.Tensor, from_right: torch.Tensor, own: torch.Tensor, w: torch.Tensor,
                   left: torch.Tensor, right: torch.Tensor, x: torch.Tensor | None, begin: int, end: int) -> None:
        native.lpd_update(from_left, from_right, own, w, left, right, x, begin=begin, end=end)


MINMAX_UINT8 = MinMaxUInt8Codec()
"""The default codec of the compressed operations."""


class PluginSegmentCodec(SegmentCodec):
    """The steps of a codec plugin (:class:`bagua_core.codecs.Codec`): its headers, ranges and
    fp32 decode-average, composed by the base class where the plugin has no fused version. Non-finite
    values follow ``BAGUA_NONFINITE`` as MinMaxUInt8's do."""

    def __init__(self, codec) -> None:
        self.codec = codec
        self.name = codec.name
        self.header_bytes = codec.header_bytes
        self.bytes_per_element = codec.bytes_per_element

    def compressed_size(self, numel: int, n_chunks: int = 1) -> int:
        return self.codec.encoded_size(numel, n_chunks)

    def start(self, values: torch.Tensor, n_chunks: int, out: torch.Tensor, stats: torch.Tensor | None = None) -> None:
        self.codec.encode_headers(values, n_chunks, out, nonfinite=env.get_nonfinite_policy())

    def encode(self, values: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int,
               decoded: torch.Tensor | None = None) -> None:
        end = min(end, self.codec.chunk_numel(values.numel(), n_chunks))
        if end > begin:
            self.codec.encode_range(values, n_chunks, out, begin, end)

    def decode(self, buf: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int = 0, end: int | None = None,
               accumulate: bool = False) -> None:
        self.codec.decode(buf, n_chunks, out, accumulate=accumulate, begin=begin, end=end)

    def decode_mean(self, bufs: Buffers, n: int, out: torch.Tensor, average: bool, begin: int = 0,
                    end: int | None = None, stats: torch.Tensor | None = None) -> None:
        self.codec.decode_average(bufs, n, out, average=average, begin=begin, end=end)


def segment_codec(name: str) -> SegmentCodec:
    """The steps of the installed codec ``name``: :data:`MINMAX_UINT8` (native, fused) for
    ``"MinMaxUInt8"``, else the codec plugin's (``ValueError`` listing the installed ones)."""
    if name == MINMAX_UINT8.name:
        return MINMAX_UINT8
    from bagua_core.codecs import check_codec_name, get_codec

    return PluginSegmentCodec(get_codec(check_codec_name(name)))
