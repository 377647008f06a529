"""``Codec``: a named compressor of float tensors into bytes, with the layout every codec shares.

Layout of ``encode(x, n_chunks)`` for ``numel`` elements: ``m = ceil(numel / n_chunks)`` elements per
chunk (the last chunk with data may be shorter, trailing chunks may be empty); chunk ``j`` becomes
slot ``j`` of ``slot_bytes(numel, n_chunks)`` bytes::

    [header_bytes of per-chunk statistics][ceil(m * bits_per_element / 8) payload bytes][zero padding to 8 bytes]

so every slot of one call has the same size (a buffer splits evenly for an alltoall), and slot ``j``
of ``encode(x, n)`` with ``x.numel() == n * m`` is itself ``encode(x[j*m:(j+1)*m], 1)``.

Segments (for a pipelined exchange): :meth:`encode_headers` writes every slot's header (statistics
of the whole chunk), then :meth:`encode_range` over element ranges ``[begin, end)`` that cover the
chunk fills in exactly the payload of :meth:`encode`; :meth:`segment_bytes` says which bytes of a
slot carry a range (so they can be sent as soon as they are written), and :meth:`decode` /
:meth:`decode_average` take the same ranges on the receiving side. Ranges start at multiples of
``segment_alignment`` elements (whole payload bytes).

Fused steps (optional; the exchanges call them, and the defaults here compose them from the plain
steps above, so a codec implementing only the plain steps runs in every exchange with the same bytes):
:meth:`new_stats` / :meth:`decode_average_with_stats` / :meth:`encode_headers_with_stats` (statistics of
an averaged chunk gathered while it is written, so its headers need no second pass),
:meth:`encode_range_decoding` (the own chunk decoded while it is encoded). A codec with compiled kernels
overrides them with its fused ones. A step that fuses one algorithm's math with a codec belongs to that
algorithm's package, which specialises it for the codecs it knows and composes the plain steps above for
the others.

Non-finite input: a chunk holding NaN/Inf decodes to NaN (``nonfinite="propagate"``, the default, so
a ``GradScaler`` sees the overflow on every rank) or raises ``NonFiniteError`` (``"raise"``).

Example::

    >>> codec = get_codec("MinMaxUInt8")
    >>> buf = codec.encode(grad, n_chunks=2)                  # uint8, codec.encoded_size(grad.numel(), 2) bytes
    >>> codec.decode(buf, 2, out := torch.empty_like(grad))   # out ~= grad
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import ClassVar

import torch

from bagua_core.runtime.native.checks import check_input, check_nonfinite, check_output

__all__ = ["Codec"]

SLOT_ALIGNMENT = 8
"""Slots are padded to a multiple of this many bytes (every built-in codec's layout)."""


def _count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class Codec(abc.ABC):
    """Subclasses set ``name``, ``bits_per_element``, ``header_bytes`` and ``unbiased`` and implement
    :meth:`encode_headers`, :meth:`encode_range` and :meth:`decode`."""

    name: ClassVar[str] = ""
    """The name algorithms select the codec by (``compression="..."``)."""
    bits_per_element: ClassVar[int] = 8
    """Payload bits per value (1, 2, 4, 8, 16 or 32), headers excluded."""
    header_bytes: ClassVar[int] = 0
    """Bytes of per-chunk statistics at the start of every slot (e.g. an fp32 min and max: 8)."""
    unbiased: ClassVar[bool] = False
    """True when ``E[decode(encode(x))] == x`` for every ``x`` (a randomised codec); deterministic
    rounding is biased, and algorithms should then use error feedback."""

    # --- what a user or an algorithm asks --------------------------------------------------------------
    @property
    def native(self) -> bool:
        """Whether encode/decode run compiled kernels on this machine (False: vectorised torch ops)."""
        return False

    @property
    def bytes_per_element(self) -> float:
        return self.bits_per_element / 8

    @property
    def segment_alignment(self) -> int:
        """Element ranges given to the range methods start at multiples of this (whole payload bytes)."""
        return max(1, 8 // self.bits_per_element)

    def chunk_numel(self, numel: int, n_chunks: int = 1) -> int:
        _count("numel", numel, 0)
        _count("n_chunks", n_chunks, 1)
        return -(-numel // n_chunks)

    def payload_bytes(self, chunk_numel: int) -> int:
        return -(-chunk_numel * self.bits_per_element // 8)

    def slot_bytes(self, numel: int, n_chunks: int = 1) -> int:
        """Bytes of one chunk's slot: header, payload, zero padding to a multiple of 8 bytes."""
        used = self.header_bytes + self.payload_bytes(self.chunk_numel(numel, n_chunks))
        return -(-used // SLOT_ALIGNMENT) * SLOT_ALIGNMENT

    def encoded_size(self, numel: int, n_chunks: int = 1) -> int:
        """Bytes of ``encode(x, n_chunks)`` for ``numel`` elements."""
        return n_chunks * self.slot_bytes(numel, n_chunks)

    def segment_bytes(self, numel: int, n_chunks: int, begin: int, end: int) -> tuple[int, int]:
        """``(lo, hi)``: the bytes of every slot that carry the chunk-local elements ``[begin, end)``; the
        range starting at 0 also carries the header, the one ending at the chunk's end the padding."""
        m = self.chunk_numel(numel, n_chunks)
        self._check_range(begin, end, m)
        lo = 0 if begin == 0 else self.header_bytes + begin * self.bits_per_element // 8
        hi = self.slot_bytes(numel, n_chunks) if end >= m else self.header_bytes + end * self.bits_per_element // 8
        return lo, hi

    # --- encoding ------------------------------------------------------------------------------------
    def encode(self, x: torch.Tensor, n_chunks: int = 1, *, out: torch.Tensor | None = None,
               nonfinite: str = "propagate") -> torch.Tensor:
        """The uint8 buffer of ``x`` (contiguous fp32/fp16/bf16) in ``n_chunks`` slots; fills ``out``
        when given."""
        check_input(x)
        out = self._buffer(x, n_chunks, out)
        self.encode_headers(x, n_chunks, out, nonfinite=nonfinite)
        m = self.chunk_numel(x.numel(), n_chunks)
        if m:
            self.encode_range(x, n_chunks, out, 0, m)
        return out

    @abc.abstractmethod
    def encode_headers(self, x: torch.Tensor, n_chunks: int, out: torch.Tensor, *, nonfinite: str = "propagate") -> torch.Tensor:
        """Write every slot's header (and zero padding) of ``encode(x, n_chunks)`` into ``out``; the
        payload bytes are left as they are. Returns ``out``."""

    @abc.abstractmethod
    def encode_range(self, x: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int) -> torch.Tensor:
        """Write the payload of the chunk-local elements ``[begin, end)`` of every chunk into ``out``,
        whose headers :meth:`encode_headers` wrote. Returns ``out``."""

    # --- decoding ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def decode(self, buf: torch.Tensor, n_chunks: int, out: torch.Tensor, *, accumulate: bool = False,
               begin: int = 0, end: int | None = None) -> torch.Tensor:
        """Write the values of ``buf`` (``out.numel()`` elements in ``n_chunks`` slots) into ``out``;
        ``accumulate=True`` adds them instead (in fp32, then rounded to ``out.dtype``). ``begin``/``end``:
        only the chunk-local elements ``[begin, end)`` of every chunk. Returns ``out``."""

    def decode_average(self, bufs: Sequence[torch.Tensor] | torch.Tensor, n: int, out: torch.Tensor, *,
                       average: bool = True, begin: int = 0, end: int | None = None) -> torch.Tensor:
        """``out = mean_k decode(bufs[k])`` (the sum when ``average=False``) over ``n`` one-chunk buffers
        of ``out.numel()`` elements (a sequence, or one tensor holding them back to back). Accumulates in
        fp32 in order k = 0, 1, ..., then divides by ``n``: every rank that decodes the same buffers
        gets the same bits. ``begin``/``end``: only ``out[begin:end]``."""
        check_output(out)
        _count("n", n, 1)
        parts = self._parts(bufs, n, out.numel())
        end = out.numel() if end is None else end
        self._check_range(begin, end, out.numel())
        flat = out.view(-1)
        acc = flat if flat.dtype == torch.float32 else torch.zeros(flat.numel(), dtype=torch.float32, device=out.device)
        acc[begin:end].zero_()
        for part in parts:
            self.decode(part, 1, acc, accumulate=True, begin=begin, end=end)
        if average:
            acc[begin:end].div_(n)
        if acc is not flat:
            flat[begin:end].copy_(acc[begin:end])
        return out

    # --- fused steps of the exchanges (optional: the defaults compose the plain steps) ----------------
    def new_stats(self) -> torch.Tensor | None:
        """A fresh accumulator for the statistics :meth:`decode_average_with_stats` gathers and
        :meth:`encode_headers_with_stats` reads (None, the default: this codec gathers nothing, and
        those steps are the plain ones). A codec returning one overrides both."""
        return None

    def decode_average_with_stats(self, bufs: Sequence[torch.Tensor] | torch.Tensor, n: int, out: torch.Tensor,
                                  stats: torch.Tensor | None, *, average: bool = True, begin: int = 0,
                                  end: int | None = None) -> torch.Tensor:
        """:meth:`decode_average`, also merging the statistics of the values written into ``stats`` (a
        :meth:`new_stats` tensor; None when the codec gathers nothing)."""
        return self.decode_average(bufs, n, out, average=average, begin=begin, end=end)

    def encode_headers_with_stats(self, x: torch.Tensor, n_chunks: int, out: torch.Tensor, stats: torch.Tensor | None,
                                  *, nonfinite: str = "propagate") -> torch.Tensor:
        """:meth:`encode_headers`, from ``stats`` gathered while ``x`` was written (one chunk) instead of a
        pass over ``x``; the same bytes either way."""
        return self.encode_headers(x, n_chunks, out, nonfinite=nonfinite)

    def encode_range_decoding(self, x: torch.Tensor, out: torch.Tensor, begin: int, end: int,
                              decoded: torch.Tensor) -> torch.Tensor:
        """:meth:`encode_range` of the one-chunk ``x`` into ``out``, and the decoded values of
        ``[begin, end)`` written into ``decoded`` (its elements i < ``decoded.numel()``: a short last chunk
        of a padded tensor). The default decodes the range from ``out`` after encoding it."""
        self.encode_range(x, 1, out, begin, end)
        stop = min(end, decoded.numel())
        if stop <= begin:
            return out
        if decoded.numel() == x.numel():
            self.decode(out, 1, decoded, begin=begin, end=end)
        else:  # ``out`` describes x.numel() values: decode into a chunk-sized scratch, keep the prefix
            scratch = torch.empty(x.numel(), dtype=torch.float32, device=x.device)
            self.decode(out, 1, scratch, begin=begin, end=end)
            decoded[begin:stop].copy_(scratch[begin:stop])
        return out

    # --- helpers for subclasses ----------------------------------------------------------------------
    def _parts(self, bufs: Sequence[torch.Tensor] | torch.Tensor, n: int, numel: int) -> list[torch.Tensor]:
        size = self.encoded_size(numel, 1)
        if isinstance(bufs, torch.Tensor):
            self.check_buffer(bufs, n * numel, n, "bufs")
            return list(bufs.view(n, size).unbind(0))
        parts = list(bufs)
        if len(parts) != n:
            raise ValueError(f"got {len(parts)} buffers but n = {n}")
        for k, part in enumerate(parts):
            self.check_buffer(part, numel, 1, f"bufs[{k}]")
        return parts

    def _buffer(self, x: torch.Tensor, n_chunks: int, out: torch.Tensor | None) -> torch.Tensor:
        if out is None:
            return torch.empty(self.encoded_size(x.numel(), n_chunks), dtype=torch.uint8, device=x.device)
        self.check_buffer(out, x.numel(), n_chunks, "out")
        if out.device != x.device:
            raise ValueError(f"out is on {out.device} but x is on {x.device}")
        return out

    def check_buffer(self, buf: object, numel: int, n_chunks: int, name: str = "buf") -> torch.Tensor:
        """A contiguous uint8 tensor of exactly ``encoded_size(numel, n_chunks)`` bytes."""
        if not isinstance(buf, torch.Tensor) or buf.dtype != torch.uint8:
            raise TypeError(f"{name} must be a uint8 tensor (an encoded buffer of codec {self.name!r})")
        if not buf.is_contiguous():
            raise ValueError(f"{name} must be contiguous; call {name}.contiguous() first")
        expected = self.encoded_size(numel, n_chunks)
        if buf.numel() != expected:
            raise ValueError(f"{name} has {buf.numel()} bytes but codec {self.name!r} encodes {numel} elements in "
                             f"{n_chunks} chunks into {expected} bytes")
        return buf

    def _check_range(self, begin: int, end: int | None, m: int) -> None:
        end = m if end is None else end
        if isinstance(begin, bool) or not isinstance(begin, int) or begin < 0 or begin % self.segment_alignment:
            raise ValueError(f"begin must be a multiple of {self.segment_alignment} >= 0 for codec {self.name!r}, "
                             f"got {begin!r}")
        if isinstance(end, bool) or not isinstance(end, int) or end < begin:
            raise ValueError(f"end must be an integer >= begin ({begin}), got {end!r}")
        if end < m and end % self.segment_alignment:
            raise ValueError(f"end must be a multiple of {self.segment_alignment} or the chunk's end ({m}) for "
                             f"codec {self.name!r}, got {end}")

    @staticmethod
    def check_nonfinite(mode: str) -> str:
        return check_nonfinite(mode)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, bits_per_element={self.bits_per_element}, "
                f"header_bytes={self.header_bytes}, unbiased={self.unbiased}, native={self.native})")
