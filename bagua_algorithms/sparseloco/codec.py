"""``ChunkTopK``: the message a sparseloco replica sends each round, encoded and decoded.

Of a fragment's flat fp32 accumulator ``e`` (tensors of ``numels`` elements, :mod:`.chunks`): per chunk the
``k'`` selected entries, their index within the chunk and their value (:mod:`.quantiser` for ``bits`` < 32,
the fp32 value itself at ``bits=32``). One uint8 buffer, its size fixed by the layout (so the replicas
allgather equal-size buffers), little-endian::

    bits < 32:  [hi: fp32 x chunks][q: 16 bits x chunks][index: 16 bits x entries][codes: ceil(entries * bits / 8)]
    bits = 32:  [value: fp32 x entries][index: 16 bits x entries]

so a round's message has at most ``sum over chunks of (k' * (bits / 8 + 2) + 8)`` bytes (6 header bytes per
chunk where 8 are allowed leave room for the last byte of codes). :meth:`~ChunkTopK.decode_average` adds the
``n`` replicas' decoded messages in fp32 in rank order into zeros and divides by ``n``: every replica gets the
same bits.

Not a registered ``Codec`` (``bagua_core.codecs``): that contract encodes dense chunk slots whose payload
grows with the elements (a slot per chunk of equal elements, element ranges for pipelined exchanges), while
this message holds a fixed number of entries per chunk of each tensor, so it needs the fragment's tensor
boundaries. It provides the three calls diloco's :class:`bagua_algorithms.diloco.FragmentExchange`
makes of a codec.

Example::

    >>> codec = ChunkTopK([4096, 64], chunk_size=4096, topk=64, bits=2)
    >>> message = codec.encode(e)                       # codec.nbytes bytes
    >>> sent = codec.decode(message, 1, torch.empty_like(e))   # e's top-k per chunk, quantised; zeros elsewhere
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_algorithms.sparseloco.chunks import ChunkLayout
from bagua_algorithms.sparseloco.quantiser import dequantise, pack, quantise, unpack

__all__ = ["ChunkTopK", "message_bytes"]


def message_bytes(chunks: int, entries: int, bits: int) -> int:
    """Bytes of one message of ``entries`` entries in ``chunks`` chunks (module doc's layout)."""
    if bits == 32:
        return 6 * entries
    return 6 * chunks + 2 * entries + -(-entries * bits // 8)


def _view(buf: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``buf`` (uint8) read as ``dtype``; copied first where it does not start on a multiple of the size."""
    if buf.storage_offset() % dtype.itemsize:
        buf = buf.clone()
    return buf.view(dtype)


def _two_bytes(values: torch.Tensor) -> torch.Tensor:
    """Integers in [0, 65535] as 2 bytes each, little-endian."""
    values = values.to(torch.int32)
    return torch.stack([values & 255, values >> 8], dim=1).to(torch.uint8).view(-1)


def _from_two_bytes(buf: torch.Tensor) -> torch.Tensor:
    pairs = buf.view(-1, 2).to(torch.int64)
    return pairs[:, 0] | (pairs[:, 1] << 8)


class ChunkTopK:
    """Encodes a fragment's accumulator into sparseloco's message and decodes messages (module doc)."""

    def __init__(self, numels: Sequence[int], chunk_size: int, topk: int, bits: int,
                 device: torch.device | str = "cpu") -> None:
        if bits not in (2, 4, 8, 32):
            raise ValueError(f"bits must be 2, 4, 8 or 32, got {bits!r}")
        self.layout = ChunkLayout(numels, chunk_size, topk, device)
        self.bits = bits
        self.nbytes = message_bytes(self.layout.chunk_count, self.layout.entry_count, bits)
        """The size of every message of this fragment."""

    def _fields(self) -> tuple[int, int, int]:
        """Byte offsets of the index field, the values/codes field and its end (module doc's layout)."""
        chunks, entries = self.layout.chunk_count, self.layout.entry_count
        if self.bits == 32:
            return 4 * entries, 0, 4 * entries
        return 6 * chunks, 6 * chunks + 2 * entries, self.nbytes

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The message of the flat fp32 ``x`` (``layout.numel`` elements): ``nbytes`` uint8."""
        if x.numel() != self.layout.numel:
            raise ValueError(f"sparseloco's message holds {self.layout.numel} elements, got {x.numel()}")
        layout = self.layout
        columns, top = layout.select(x)
        values = x[layout.entry_base + columns].to(torch.float32)
        out = torch.empty(self.nbytes, dtype=torch.uint8, device=x.device)
        index_at, values_at, end = self._fields()
        out[index_at : index_at + 2 * layout.entry_count] = _two_bytes(columns)
        if self.bits == 32:
            out[values_at:end] = values.view(torch.uint8)
            return out
        largest = top[:, 0].clone(memory_format=torch.contiguous_format)  # (a strided column: copied to view as bytes)
        hi, q, codes = quantise(values, layout.entry_chunk, largest, layout.smallest_sent(top), self.bits)
        chunks = layout.chunk_count
        out[: 4 * chunks] = hi.view(torch.uint8)
        out[4 * chunks : 6 * chunks] = _two_bytes(q)
        out[values_at:end] = pack(codes, self.bits)
        return out

    def entries(self, buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(positions, values)`` of a message: each entry's index in the fragment (int64) and its decoded value
        (fp32). Any bytes decode to positions inside the entry's chunk (an index past its end to its last)."""
        layout = self.layout
        if buf.dtype != torch.uint8 or buf.numel() != self.nbytes:
            raise ValueError(f"a sparseloco message of this fragment is {self.nbytes} uint8 bytes, got "
                             f"{buf.numel()} of {buf.dtype}")
        index_at, values_at, end = self._fields()
        # a message decodes inside the fragment whatever its bytes: the output of a collective that failed (a peer
        # died in it) is garbage, and decoding it must not raise before the step's transaction discards it
        columns = torch.minimum(_from_two_bytes(buf[index_at : index_at + 2 * layout.entry_count]), layout.entry_last)
        positions = layout.entry_base + columns
        if self.bits == 32:
            return positions, _view(buf[values_at:end], torch.float32)
        chunks = layout.chunk_count
        hi = _view(buf[: 4 * chunks], torch.float32)
        q = _from_two_bytes(buf[4 * chunks : 6 * chunks])
        codes = unpack(buf[values_at:end], layout.entry_count, self.bits)
        return positions, dequantise(codes, layout.entry_chunk, hi, q, self.bits)

    def decode(self, buf: torch.Tensor, n_chunks: int, out: torch.Tensor) -> torch.Tensor:
        """Write the message's values into the flat fp32 ``out`` (zeros where it sends nothing); ``n_chunks``
        must be 1 (one message)."""
        if n_chunks != 1:
            raise ValueError(f"a sparseloco message is decoded whole (n_chunks=1), got n_chunks={n_chunks}")
        positions, values = self.entries(buf)
        out.zero_()
        out.view(-1).index_put_((positions,), values)
        return out

    def decode_average(self, bufs: torch.Tensor, n: int, out: torch.Tensor) -> torch.Tensor:
        """``out`` = the mean of the ``n`` messages held back to back in ``bufs`` (fp32, summed in order)."""
        if bufs.numel() != n * self.nbytes:
            raise ValueError(f"expected {n} sparseloco messages of {self.nbytes} bytes, got {bufs.numel()} bytes")
        flat = out.view(-1)
        flat.zero_()
        for k in range(n):
            positions, values = self.entries(bufs[k * self.nbytes : (k + 1) * self.nbytes])
            flat.index_add_(0, positions, values)
        return out.div_(n)
