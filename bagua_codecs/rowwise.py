"""``RowwiseCodec``: write a codec as three vectorised torch functions over the rows of chunks.

A subclass gives per-chunk statistics (:meth:`row_headers`), how values become payload bytes given
those statistics (:meth:`quantise`) and back (:meth:`dequantise`); this class does the layout of
:mod:`bagua_core.codecs.base` (slots, padding, ranges, the short last chunk). The built-in codecs are written on it,
and a third party's may be (``from bagua_codecs.rowwise import RowwiseCodec``; ``bagua_core.codecs`` still offers
the name). Statistics see each
chunk's own elements only; inside the payload the short last chunk is padded with its last element.

Example::

    class Int8Symmetric(RowwiseCodec):
        name, bits_per_element, header_bytes = "int8_symmetric", 8, 4
        def row_headers(self, values):            # scale = max |x| / 127, as 4 bytes per row
            scale = values.abs().amax(dim=1, keepdim=True) / 127
            return scale.view(torch.uint8), torch.isfinite(scale).view(-1)
        def quantise(self, values, headers):
            return (values / headers.view(torch.float32)).round().clamp(-127, 127).to(torch.int8).view(torch.uint8)
        def dequantise(self, payload, headers, count):
            return payload.view(torch.int8).float() * headers.view(torch.float32)
"""

from __future__ import annotations

import abc

import torch

from bagua_core.codecs import Codec
from bagua_core.kernels import NonFiniteError, check_input, check_output

__all__ = ["RowwiseCodec"]


class RowwiseCodec(Codec):
    """A codec from :meth:`row_headers`, :meth:`quantise` and :meth:`dequantise` (torch ops)."""

    @abc.abstractmethod
    def row_headers(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(headers, ok)`` for the fp32 rows ``values`` ([rows, k]): ``headers`` [rows, header_bytes]
        uint8; ``ok`` [rows] bool, False where a row cannot be represented (NaN/Inf), whose header must
        then make :meth:`dequantise` return NaN."""

    @abc.abstractmethod
    def quantise(self, values: torch.Tensor, headers: torch.Tensor) -> torch.Tensor:
        """The payload bytes ([rows, ceil(s * bits / 8)] uint8) of the fp32 values [rows, s]."""

    @abc.abstractmethod
    def dequantise(self, payload: torch.Tensor, headers: torch.Tensor, count: int) -> torch.Tensor:
        """The fp32 values [rows, count] of ``payload`` (at least ``count`` values' worth of bytes)."""

    # --- layout ---------------------------------------------------------------------------------------
    def _shape(self, numel: int, n_chunks: int) -> tuple[int, int, int]:
        """``(m, full, rest)``: chunk size, number of full chunks, elements of the short chunk (0: none)."""
        m = self.chunk_numel(numel, n_chunks)
        if m == 0:
            return 0, 0, 0
        return m, numel // m, numel % m

    def _payload(self, slots: torch.Tensor, begin: int, end: int) -> torch.Tensor:
        lo = self.header_bytes + begin * self.bits_per_element // 8
        return slots[:, lo : self.header_bytes + -(-end * self.bits_per_element // 8)]

    def encode_headers(self, x: torch.Tensor, n_chunks: int, out: torch.Tensor, *, nonfinite: str = "propagate") -> torch.Tensor:
        check_input(x)
        self.check_nonfinite(nonfinite)
        self._buffer(x, n_chunks, out)
        flat = x.reshape(-1)
        m, full, rest = self._shape(flat.numel(), n_chunks)
        slots = out.view(n_chunks, -1)
        slots[:, self.header_bytes + self.payload_bytes(m):].zero_()
        slots[full + (rest > 0):].zero_()
        pieces = []
        if full:
            pieces.append((0, flat[: full * m].view(full, m)))
        if rest:
            pieces.append((full, flat[full * m :].view(1, rest)))
        for row, values in pieces:
            headers, ok = self.row_headers(values.float())
            if nonfinite == "raise" and not bool(ok.all()):
                bad = row + int((~ok).nonzero()[0, 0])
                raise NonFiniteError(f"input chunk {bad} contains NaN/Inf, cannot encode it with codec {self.name!r}; "
                                     "pass nonfinite='propagate' to send it as NaN")
            slots[row : row + values.shape[0], : self.header_bytes] = headers
        return out

    def encode_range(self, x: torch.Tensor, n_chunks: int, out: torch.Tensor, begin: int, end: int) -> torch.Tensor:
        check_input(x)
        self._buffer(x, n_chunks, out)
        flat = x.reshape(-1)
        m, full, rest = self._shape(flat.numel(), n_chunks)
        end = min(end, m)
        self._check_range(begin, end, m)
        if end <= begin:
            return out
        slots = out.view(n_chunks, -1)
        if full:
            values = flat[: full * m].view(full, m)[:, begin:end].float()
            self._payload(slots[:full], begin, end).copy_(self.quantise(values, slots[:full, : self.header_bytes]))
        if rest:
            start = full * m
            own = flat[start + begin : start + min(end, rest)].float()
            values = torch.cat([own, flat[-1:].float().expand(end - begin - own.numel())]).view(1, -1)
            row = slots[full : full + 1]
            self._payload(row, begin, end).copy_(self.quantise(values, row[:, : self.header_bytes]))
        return out

    def decode(self, buf: torch.Tensor, n_chunks: int, out: torch.Tensor, *, accumulate: bool = False,
               begin: int = 0, end: int | None = None) -> torch.Tensor:
        check_output(out)
        self.check_buffer(buf, out.numel(), n_chunks)
        if buf.device != out.device:
            raise ValueError(f"buf is on {buf.device} but out is on {out.device}")
        flat = out.view(-1)
        m, full, rest = self._shape(flat.numel(), n_chunks)
        end = m if end is None else min(end, m)
        self._check_range(begin, end, m)
        if end <= begin:
            return out
        slots = buf.view(n_chunks, -1)
        if full:
            values = self.dequantise(self._payload(slots[:full], begin, end), slots[:full, : self.header_bytes], end - begin)
            self._store(flat[: full * m].view(full, m)[:, begin:end], values[:, : end - begin], accumulate)
        if rest and begin < rest:
            row = slots[full : full + 1]
            values = self.dequantise(self._payload(row, begin, end), row[:, : self.header_bytes], end - begin)
            stop = min(end, rest)
            self._store(flat[full * m + begin : full * m + stop].view(1, -1), values[:, : stop - begin], accumulate)
        return out

    @staticmethod
    def _store(target: torch.Tensor, values: torch.Tensor, accumulate: bool) -> None:
        if not accumulate:
            target.copy_(values)
        elif target.dtype == torch.float32:
            target.add_(values)
        else:
            target.copy_(target.float() + values)
