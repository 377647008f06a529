"""``ChunkTopK``: the message a sparseloco replica sends each round, encoded and decoded.

Of a fragment's flat fp32 accumulator ``e`` (tensors of ``numels`` elements, :mod:`.chunks`): per chunk the
``k'`` selected entries, in ascending index within the chunk, their indices and their values (:mod:`.quantiser`
for ``bits`` < 32, the fp32 value itself at ``bits=32``). One uint8 buffer, its size fixed by the layout (so the
replicas allgather equal-size buffers), little-endian::

    bits < 32:  [hi: fp32 x chunks][q: 16 bits x chunks][index field][codes: ceil(entries * bits / 8)]
    bits = 32:  [value: fp32 x entries][index field]

The index field is one bit string (bit ``j`` is bit ``j % 8`` of its byte ``j // 8``; zeros from its last bit
to the byte's end) holding the Elias-Fano code of each chunk's sorted indices. A chunk of ``m`` elements
sending ``k' < m`` entries ``i_0 < ... < i_{k'-1}`` has ``l = floor(log2(m / k'))`` and is coded as::

    low:    the l low bits of each i_j (i_j mod 2^l, lowest bit first), entry after entry
    upper:  k' + ((m - 1) >> l) bits, bit (i_j >> l) + j set for each j, the others zero

(every sorted set fits: the last bit set is at most ``((m - 1) >> l) + k' - 1``); a chunk sending all its
entries (``k' = m``: its indices are ``0 .. m - 1``) has no bits. The field holds the low bits of every chunk,
chunk after chunk, then the upper bits of every chunk, chunk after chunk. A chunk's index bits are
``k' * (l + 1) + ((m - 1) >> l)``, at most ``k' * (2 + log2(m / k'))``, so a round's message has at most
``sum over chunks of (k' * (bits + 2 + log2(m / k')) / 8 + 6) + 2`` bytes (6 header bytes per chunk, and a
byte each for the last, partial bytes of the index field and of the codes). At the defaults (``m`` 4096,
``k'`` 64, 2 bits) a chunk costs 6 + 63.875 + 16 = 85.875 bytes, 1/190.8 of its 16384 fp32 bytes.
:meth:`~ChunkTopK.decode_average` adds the ``n`` replicas' decoded messages in fp32 in rank order into zeros
and divides by ``n``: every replica gets the same bits.

Any bytes decode to indices inside their entry's chunk (the output of a failed collective is garbage, and it is
decoded before the step is discarded): entry ``j`` of a chunk (from 0) takes set upper bit number ``b + j`` of
the field (from 0), ``b`` the set upper bits of the chunks before it (its own chunk's set bit number ``j``
where that chunk has more than ``j`` set; else a later chunk's, or the field's end), ``i >> l`` is that bit's
position less that of the chunk's first upper bit less ``j``, and an index past the chunk's end becomes its last.

The native kernels (:mod:`.kernels`: C on contiguous fp32 / uint8 CPU tensors under the ``BAGUA_NATIVE``
policy, CUDA on CUDA tensors where they are loaded) serve :meth:`~ChunkTopK.encode`, :meth:`~ChunkTopK.entries`,
:meth:`~ChunkTopK.decode` and :meth:`~ChunkTopK.decode_average` when they take the tensors, and give the bits of
the torch code below (the specification, and the fallback elsewhere), garbage bytes included.
:meth:`~ChunkTopK.encode_residual` is a round's sender side in one call: the accumulator's update, its message
and the error feedback (``e -= decode(message)``), one pass over each chunk natively;
:meth:`~ChunkTopK.encode_difference` the same with the outer gradient ``start - params`` taken in that pass;
:meth:`~ChunkTopK.average_entries` the mean of n messages as its entries only (the outer step of the receiving
side moves those alone), and :meth:`~ChunkTopK.put_entries` writes the moved entries and the fragment's weights
in one pass.

Not a registered ``Codec`` (``bagua_core.codecs``): that contract encodes dense chunk slots whose payload
grows with the elements (a slot per chunk of equal elements, element ranges for pipelined exchanges), while
this message holds a fixed number of entries per chunk of each tensor, so it needs the fragment's tensor
boundaries. It provides the three calls diloco's :class:`bagua_algorithms.diloco.FragmentExchange`
makes of a codec.

Example::

    >>> codec = ChunkTopK([4096, 64], chunk_size=4096, topk=64, bits=2)
    >>> message = codec.encode(e)                       # codec.nbytes bytes
    >>> sent = codec.decode(message, 1, torch.empty_like(e))   # e's top-k per chunk, quantised; zeros elsewhere
    >>> message = codec.encode_residual(e, delta, 0.95)  # e = 0.95 e + delta, its message, e -= what it sends
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_algorithms.sparseloco.chunks import ChunkLayout
from bagua_algorithms.sparseloco.kernels import NativeLayout, NativeMessages
from bagua_algorithms.sparseloco.quantiser import dequantise, pack, quantise, unpack

__all__ = ["ChunkTopK", "message_bytes"]


def _elias_fano(length: int, sent: int) -> tuple[int, int]:
    """``(l, upper bits)`` of a chunk of ``length`` elements sending ``sent`` (module doc); (0, 0): no bits."""
    if sent == length:
        return 0, 0
    low = (length // sent).bit_length() - 1  # floor(log2(length / sent))
    return low, sent + ((length - 1) >> low)


def _index_bits(length: int, sent: int) -> int:
    """Bits of the index field holding a chunk of ``length`` elements that sends ``sent`` (module doc)."""
    low, upper = _elias_fano(length, sent)
    return sent * low + upper


def message_bytes(lengths: Sequence[int], sent: Sequence[int], bits: int) -> int:
    """Bytes of one message of chunks of ``lengths`` elements sending ``sent`` entries each (module doc)."""
    index = -(-sum(_index_bits(m, k) for m, k in zip(lengths, sent, strict=True)) // 8)
    entries = sum(sent)
    if bits == 32:
        return 4 * entries + index
    return 6 * len(lengths) + index + -(-entries * bits // 8)


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


def _exclusive_cumsum(x: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(x, 0) - x


class _IndexField:
    """The index field of a layout (module doc): where each entry's low bits and upper bit lie.

    The bit string is handled as 32-bit words held in int64 (``l`` bits at bit ``a`` lie in words ``a >> 5`` and
    the next, ``l`` at most 16 under ``MAX_CHUNK_SIZE``), so encoding and decoding are a few vectorised passes
    over the entries, whatever the chunks."""

    def __init__(self, layout: ChunkLayout, device: torch.device | str) -> None:
        lengths, sent = layout.chunk_lengths, layout.entries_per_chunk
        self.nbytes = -(-sum(_index_bits(m, k) for m, k in zip(lengths, sent)) // 8)
        sent_t = torch.tensor(sent, dtype=torch.long)
        rank = torch.arange(layout.entry_count) - torch.repeat_interleave(_exclusive_cumsum(sent_t), sent_t)
        coded = torch.tensor([m > k for m, k in zip(lengths, sent)], dtype=torch.bool)
        entries = torch.repeat_interleave(coded, sent_t).nonzero().squeeze(1)
        self.coded, self.rank = (None, None) if coded.all() else (entries.to(device), rank.to(device))
        """The entries of the chunks whose indices travel (``k' < m``), and each entry's rank in its chunk (its
        index where the chunk sends all its entries); None where every chunk's indices travel. What follows is
        of these entries and chunks."""
        k = sent_t[coded]
        low_c, upper_c = torch.tensor([_elias_fano(m, n) for m, n in zip(lengths, sent)],
                                      dtype=torch.long).view(-1, 2)[coded].T
        low = torch.repeat_interleave(low_c, k)
        low_at = _exclusive_cumsum(low)
        low_bits = int(low.sum())
        upper_start = low_bits + _exclusive_cumsum(upper_c)
        first = _exclusive_cumsum(k)
        chunk = torch.repeat_interleave(torch.arange(k.numel()), k)
        self.upper_bytes = (low_bits // 8, low_bits % 8, int(upper_c.sum()))
        """The field's bytes from the one holding the first upper bit: (its byte, the bit in it, upper bits)."""
        self.low, self.low_mask = low.to(device), ((1 << low) - 1).to(device)
        """Each entry's ``l`` and ``2^l - 1``."""
        self.low_word, self.low_shift = (low_at >> 5).to(device), (low_at & 31).to(device)
        """Where each entry's low bits start: bit ``low_shift`` of word ``low_word``."""
        self.upper_start = upper_start.to(device)
        """The bit where each chunk's upper bits start."""
        self.upper_at = (upper_start[chunk] + rank[entries]).to(device)
        """The bit an entry sets for ``i >> l == 0``: its chunk's first upper bit plus its rank in the chunk."""
        self.first, self.chunk = first.to(device), chunk.to(device)
        """Each chunk's first entry, each entry's chunk."""
        self.last = (torch.tensor(lengths, dtype=torch.long)[coded].repeat_interleave(k) - 1).to(device)
        """The last index within each entry's chunk."""

    def encode(self, columns: torch.Tensor) -> torch.Tensor:
        """The field (``nbytes`` uint8) of each entry's index in its chunk (ascending within a chunk)."""
        column = columns if self.coded is None else columns[self.coded]
        words = torch.zeros(-(-self.nbytes // 4) + 1, dtype=torch.int64, device=columns.device)
        _add_bits(words, self.low_word, self.low_shift, column & self.low_mask)
        upper = self.upper_at + (column >> self.low)
        _add_bits(words, upper >> 5, upper & 31, torch.ones_like(column))
        shifts = torch.arange(0, 32, 8, device=columns.device)
        return ((words[:-1].unsqueeze(1) >> shifts) & 255).to(torch.uint8).view(-1)[: self.nbytes]

    def decode(self, field: torch.Tensor) -> torch.Tensor:
        """Each entry's index in its chunk (int64) from the field's bytes, inside the chunk whatever the bytes."""
        padded = torch.zeros(-(-self.nbytes // 4) * 4 + 4, dtype=torch.int64, device=field.device)
        padded[: self.nbytes] = field
        words = (padded.view(-1, 4) << torch.arange(0, 32, 8, device=field.device)).sum(1)
        low = ((words[self.low_word] | (words[self.low_word + 1] << 32)) >> self.low_shift) & self.low_mask
        column = torch.minimum((self._high(field) << self.low) | low, self.last)
        return column if self.coded is None else self.rank.index_put((self.coded,), column)

    def _high(self, field: torch.Tensor) -> torch.Tensor:
        """Each entry's ``i >> l``: the position of the ``j``-th set upper bit of its chunk, less that of the
        chunk's first upper bit, less ``j`` (module doc: a later set bit, or the field's end, where it has fewer)."""
        byte, bit, count = self.upper_bytes
        shifts = torch.arange(8, dtype=torch.uint8, device=field.device)
        bits = ((field[byte:].unsqueeze(1) >> shifts) & 1).view(-1)[bit : bit + count]
        at = bits.nonzero().squeeze(1) + (8 * byte + bit)  # the set upper bits, ascending
        before = torch.searchsorted(at, self.upper_start)  # the set upper bits ahead of each chunk's
        if at.numel() == self.chunk.numel() and torch.equal(before, self.first):  # k' in every chunk, as encoded
            return at - self.upper_at
        at = torch.cat([at, at.new_full((1,), 8 * byte + bit + count)])  # then the field's end
        ordinal = (before - self.first)[self.chunk] + torch.arange(self.chunk.numel(), device=field.device)
        return at[ordinal.clamp_(max=at.numel() - 1)] - self.upper_at


def _add_bits(words: torch.Tensor, word: torch.Tensor, shift: torch.Tensor, values: torch.Tensor) -> None:
    """Add ``values`` (below 2^32) at bit ``shift`` of word ``word`` of the bit string held 32 bits per int64 word
    in ``words``, which is zero there: adding is writing them (a value may run on into the next word)."""
    shifted = values << shift
    words.index_add_(0, word, shifted & 0xFFFFFFFF)
    words.index_add_(0, word + 1, shifted >> 32)


class ChunkTopK:
    """Encodes a fragment's accumulator into sparseloco's message and decodes messages (module doc)."""

    def __init__(self, numels: Sequence[int], chunk_size: int, topk: int, bits: int,
                 device: torch.device | str = "cpu", native: bool = True) -> None:
        if bits not in (2, 4, 8, 32):
            raise ValueError(f"bits must be 2, 4, 8 or 32, got {bits!r}")
        self.layout = ChunkLayout(numels, chunk_size, topk, device)
        self.bits = bits
        self.nbytes = message_bytes(self.layout.chunk_lengths, self.layout.entries_per_chunk, bits)
        """The size of every message of this fragment."""
        self._index = _IndexField(self.layout, device)
        self._native = NativeMessages(self.layout, enabled=native)
        """The native kernels (module doc); ``native=False``: the torch path always (the tests and the benchmark
        compare the kernels with it)."""

    def _fields(self) -> tuple[int, int, int]:
        """Byte offsets of the index field, the values/codes field and its end (module doc's layout)."""
        chunks, entries = self.layout.chunk_count, self.layout.entry_count
        if self.bits == 32:
            return 4 * entries, 0, 4 * entries
        return 6 * chunks, 6 * chunks + self._index.nbytes, self.nbytes

    def encoded_size(self, numel: int, n_chunks: int = 1) -> int:
        """``nbytes``, the size of the message of ``layout.numel`` elements (``FragmentCodec``'s call)."""
        if numel != self.layout.numel or n_chunks != 1:
            raise ValueError(f"sparseloco's message holds {self.layout.numel} elements in one chunk, got {numel} in "
                             f"{n_chunks}")
        return self.nbytes

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The message of the flat fp32 ``x`` (``layout.numel`` elements): ``nbytes`` uint8."""
        if x.numel() != self.layout.numel:
            raise ValueError(f"sparseloco's message holds {self.layout.numel} elements, got {x.numel()}")
        native = self._native.serving(x)
        if native is not None:
            return native.encode(x, torch.empty(self.nbytes, dtype=torch.uint8, device=x.device), self.bits)
        return self._encode_torch(x)

    def encode_residual(self, residual: torch.Tensor, delta: torch.Tensor, error_decay: float) -> torch.Tensor:
        """A round's sender side: ``residual = error_decay * residual + delta`` (fp32: ``mul_`` rounded, then
        ``add_``; no multiply at 1), the message of ``residual`` (returned), and ``residual -=`` what the message
        decodes to (only the sent entries change). Bit for bit ``mul_``, ``add_``, :meth:`encode`, :meth:`decode`
        and ``sub_`` (diloco's ``FragmentExchange.start``), which is the fallback."""
        if residual.numel() != self.layout.numel or delta.numel() != self.layout.numel:
            raise ValueError(f"sparseloco's message holds {self.layout.numel} elements, got a residual of "
                             f"{residual.numel()} and a delta of {delta.numel()}")
        native = self._native.serving(residual, delta) if residual.dtype == delta.dtype == torch.float32 else None
        if native is not None:
            out = torch.empty(self.nbytes, dtype=torch.uint8, device=residual.device)
            return native.encode(residual, out, self.bits, delta, error_decay, feedback=True)
        if error_decay != 1.0:
            residual.mul_(error_decay)
        residual.add_(delta)
        message = self.encode(residual)
        residual.sub_(self.decode(message, 1, torch.empty_like(residual)))
        return message

    def encode_difference(self, residual: torch.Tensor, start: torch.Tensor, params: Sequence[torch.Tensor],
                          error_decay: float, scratch: torch.Tensor) -> torch.Tensor:
        """:meth:`encode_residual` of ``delta = start - params``: the flat fp32 ``start`` less the fragment's tensors
        (``params``, of the layout's ``numels``, one after the other). Bit for bit ``torch.sub`` of each tensor into
        its place of a flat fp32 delta, then :meth:`encode_residual`. The C kernels take the difference in their
        pass over each chunk (no delta written or read again: a third less memory traffic on the round's sender
        side); elsewhere the delta is written into ``scratch`` (fp32, ``layout.numel``) first."""
        numels = [p.numel() for p in params]
        if numels != self.layout.numels or start.numel() != self.layout.numel:
            raise ValueError(f"sparseloco's message holds tensors of {self.layout.numels} elements, got {numels} "
                             f"and a start of {start.numel()}")
        tensors = (residual, start, *params)
        native = self._native.serving(*tensors) if all(t.dtype == torch.float32 for t in tensors) else None
        if native is not None and hasattr(native, "encode_difference"):
            out = torch.empty(self.nbytes, dtype=torch.uint8, device=residual.device)
            return native.encode_difference(residual, start, [p.detach() for p in params], out, self.bits,
                                            error_decay)
        at = 0
        for param in params:
            n = param.numel()
            torch.sub(start[at : at + n].view(param.shape), param.detach(), out=scratch[at : at + n].view(param.shape))
            at += n
        return self.encode_residual(residual, scratch, error_decay)

    def _encode_torch(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`encode` in torch ops (the specification; the native kernels give its bits)."""
        layout = self.layout
        columns, top = layout.select(x)
        values = x[layout.entry_base + columns].to(torch.float32)
        out = torch.empty(self.nbytes, dtype=torch.uint8, device=x.device)
        index_at, values_at, end = self._fields()
        out[index_at : index_at + self._index.nbytes] = self._index.encode(columns)
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
        self._check_message(buf)
        native = self._native.serving(buf)
        if native is not None:
            return native.entries(buf, self.bits)
        index_at, values_at, end = self._fields()
        # a message decodes inside the fragment whatever its bytes: the output of a collective that failed (a peer
        # died in it) is garbage, and decoding it must not raise before the step's transaction discards it
        positions = layout.entry_base + self._index.decode(buf[index_at : index_at + self._index.nbytes])
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
        self._check_message(buf)
        native = self._serving_decode(buf, out)
        if native is not None:
            return native.decode(buf, self.nbytes, 1, out, self.bits, average=False)
        positions, values = self.entries(buf)
        out.zero_()
        out.view(-1).index_put_((positions,), values)
        return out

    def decode_average(self, bufs: torch.Tensor, n: int, out: torch.Tensor) -> torch.Tensor:
        """``out`` = the mean of the ``n`` messages held back to back in ``bufs`` (fp32, summed in order)."""
        if bufs.numel() != n * self.nbytes:
            raise ValueError(f"expected {n} sparseloco messages of {self.nbytes} bytes, got {bufs.numel()} bytes")
        native = self._serving_decode(bufs, out) if n >= 1 else None
        if native is not None:
            return native.decode(bufs, self.nbytes, n, out, self.bits, average=True)
        flat = out.view(-1)
        flat.zero_()
        for k in range(n):
            positions, values = self.entries(bufs[k * self.nbytes : (k + 1) * self.nbytes])
            flat.index_add_(0, positions, values)
        return out.div_(n)

    def average_entries(self, bufs: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`decode_average` as its entries: ``(positions, values)``, each position where any of the ``n``
        messages sends an entry once (int64) and the mean there (fp32); the mean is 0 elsewhere. Bit for bit the
        dense mean at those positions, without writing the fragment's zeros (an outer step on these entries alone
        moves what a dense one would)."""
        if bufs.numel() != n * self.nbytes or n < 1:
            raise ValueError(f"expected {n} sparseloco messages of {self.nbytes} bytes, got {bufs.numel()} bytes")
        native = self._native.serving(bufs) if bufs.device.type == "cpu" else None
        if native is not None:
            return native.average_entries(bufs, self.nbytes, n, self.bits)
        dense = self.decode_average(bufs, n, torch.empty(self.layout.numel, dtype=torch.float32, device=bufs.device))
        positions = torch.cat([self.entries(bufs[k * self.nbytes : (k + 1) * self.nbytes])[0]
                               for k in range(n)]).unique()
        return positions, dense[positions]

    def put_entries(self, theta: torch.Tensor, positions: torch.Tensor, values: torch.Tensor,
                    params: Sequence[torch.Tensor]) -> None:
        """``theta[positions] = values`` (the flat fp32 ``theta``; positions as :meth:`average_entries` gives them),
        then ``theta`` copied into the fragment's tensors ``params`` (one after the other): natively in one pass over
        each chunk, where the C kernels take the tensors; else ``index_copy_`` and a copy per tensor."""
        params = [p.detach() for p in params]
        tensors = (theta, values, *params)
        native = self._native.serving(*tensors) if all(t.dtype == torch.float32 for t in tensors) else None
        if native is not None and hasattr(native, "put") and [p.numel() for p in params] == self.layout.numels:
            native.put(positions, values, theta, params)
            return
        theta.index_copy_(0, positions, values)
        at = 0
        for param in params:
            param.copy_(theta[at : at + param.numel()].view(param.shape))
            at += param.numel()

    def native_serves(self, *tensors: torch.Tensor) -> bool:
        """Whether the native kernels take these tensors (module doc); the torch path serves them otherwise."""
        return self._native.serving(*tensors) is not None

    def _check_message(self, buf: torch.Tensor) -> None:
        if buf.dtype != torch.uint8 or buf.numel() != self.nbytes:
            raise ValueError(f"a sparseloco message of this fragment is {self.nbytes} uint8 bytes, got "
                             f"{buf.numel()} of {buf.dtype}")

    def _serving_decode(self, bufs: torch.Tensor, out: torch.Tensor) -> NativeLayout | None:
        """The native kernels that decode ``bufs`` (uint8, checked) into ``out``: fp32, the fragment's elements."""
        if bufs.dtype != torch.uint8 or out.dtype != torch.float32 or out.numel() != self.layout.numel:
            return None
        return self._native.serving(bufs, out)
