"""The bytegrad exchange pipelined: two rounds over this package's pipelined-exchange engine
(:mod:`.pipeline`: segments, a schedule, sends and receives), run here with
the codec's steps (:class:`bagua_core.codecs.Codec`: its fused ones where it has them, MinMaxUInt8's
native kernels by default).

Same bytes and results as the plain exchange (``bagua_algorithms.bytegrad.compressed``), in two halves.
:meth:`PipelinedExchange.start` posts the receives of both rounds and sends round 1 (the alltoall):
every chunk's header (min/max) is written first, so each segment of the payload is final as soon as
it is encoded and goes on the wire (chunk j to rank j) while the next one is encoded.
:meth:`PipelinedExchange.finish` decodes the received segments and averages them in fp32 into the own
chunk, gathering the min/max of the average in the same pass, then runs round 2 (the allgather): the
averaged own chunk's header comes from those min/max (no second pass over it); each segment is
encoded, decoded into the tensor in the same pass (the own chunk is never decoded again), and sent to
every rank; the other ranks' segments are decoded into the tensor as they arrive. Between the two
halves the bucket op lets later buckets start (``BaguaBucket.may_defer``): their round 1 fills the
link while this rank waits for the slowest peer's chunk, which round 2 needs. :meth:`run` does both
halves with round 1's segments decoded while later ones travel. Only for fp32 tensors on the CPU
(other tensors take the plain path). qadam's momentum exchange is this same exchange.

Example::

    >>> exchange = PipelinedExchange(flat, comm, True, workspace, pieces, codec)  # PipelinedExchange.applies(flat)
    >>> exchange.start()     # round 1 on the wire
    >>> exchange.finish()    # flat is the average
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bagua_algorithms.bytegrad.pipeline import Segment, post_receives, schedule, segments, send_segment, wait_all
from bagua_core.api import BaguaCommunicator, record_payload, settings
from bagua_core.codecs import Codec

if TYPE_CHECKING:  # pragma: no cover
    from bagua_algorithms.bytegrad.workspace import CompressedWorkspace

__all__ = ["PipelinedExchange"]

_TAG = 0x6267_0000
"""Point-to-point tags of round 1: ``_TAG`` + segment index; round 2's start at ``_TAG + _ROUND2``."""
_ROUND2 = 1 << 15
"""Round 2's tags never equal round 1's, whatever the buckets' segment counts: with several buckets in
flight a rank sends a later bucket's round 1 before an earlier bucket's round 2, and a receive is
matched to the first posted receive of its peer and tag."""


class PipelinedExchange:
    """One bytegrad exchange of ``flat`` (fp32, CPU) over ``comm`` (more than one rank), in place.
    ``pieces``: ``(values, chunks, slots)`` that encode into ``ws.sent``. Call :meth:`run`, or
    :meth:`start` then :meth:`finish` once (``flat`` and the workspace untouched in between)."""

    @staticmethod
    def applies(flat: torch.Tensor) -> bool:
        """Whether the pipelined path takes ``flat`` (fp32 on the CPU); other tensors take the plain one."""
        return flat.dtype == torch.float32 and flat.device.type == "cpu"

    def __init__(self, flat: torch.Tensor, comm: BaguaCommunicator, average: bool, ws: CompressedWorkspace,
                 pieces: list[tuple[torch.Tensor, int, torch.Tensor]], codec: Codec) -> None:
        self.flat, self.comm, self.average, self.ws, self.pieces, self.codec = flat, comm, average, ws, pieces, codec
        self.n, self.me = comm.nranks(), comm.rank()
        slot = ws.sent.numel() // self.n
        self.sent, self.received = ws.sent.view(self.n, slot), ws.received.view(self.n, slot)
        self.gathered = ws.gathered.view(self.n, slot)
        self.segs = segments(ws.chunk, slot, codec.header_bytes, codec.bytes_per_element)
        if len(self.segs) > _ROUND2:  # pragma: no cover - 2**34 values per rank
            raise ValueError(f"a bytegrad chunk of {ws.chunk} values needs {len(self.segs)} segments, at most {_ROUND2}")
        self.peers = [p for p in range(self.n) if p != self.me]
        self.nonfinite = settings.nonfinite_policy()
        self.stats = codec.new_stats()
        self.sends: list = []

    def run(self) -> None:
        """Both rounds now, round 1's received segments decoded while later ones are encoded and sent
        (measured: sending every segment before decoding any cost 6-16% on 2 hosts at 1 Gbit/s)."""
        self._post_both_rounds()
        self._round1(decode=True)
        self._round2()

    def start(self) -> None:
        """Post both rounds' receives and send round 1; :meth:`finish` does the rest."""
        self._post_both_rounds()
        self._round1(decode=False)

    def finish(self) -> None:
        """Decode round 1 (what :meth:`start` left), run round 2; ``flat`` holds the result."""
        for segment in self.segs:
            self._decode_average(segment)
        self._round2()

    # --- the two rounds ---------------------------------------------------------------------------
    def _post_both_rounds(self) -> None:
        """Both rounds' receives first: the peers' segments can be sent as soon as they are encoded."""
        self.received1 = post_receives(self.comm, self.segs, [(p, self.received[p]) for p in self.peers], _TAG)
        self.received2 = post_receives(self.comm, self.segs, [(p, self.gathered[p]) for p in self.peers],
                                       _TAG + _ROUND2)

    def _round1(self, decode: bool) -> None:
        """Chunk j to rank j (the own chunk is read from the send buffer); with ``decode``, each received
        segment decoded and averaged ``LAG`` segments behind the sends, else every segment only sent."""
        codec = self.codec
        for values, chunks, slots in self.pieces:
            codec.encode_headers(values, chunks, slots, nonfinite=self.nonfinite)
        record_payload("alltoall", self.ws.sent)
        targets = [(p, self.sent[p]) for p in self.peers]
        for encoding, decoding in schedule(self.segs, None if decode else len(self.segs)):
            if encoding is not None:
                for values, chunks, slots in self.pieces:
                    codec.encode_range(values, chunks, slots, encoding.begin, encoding.end)
                self.sends += send_segment(self.comm, encoding, targets, _TAG)
            if decoding is not None and decode:
                self._decode_average(decoding)

    def _decode_average(self, segment: Segment) -> None:
        wait_all(self.received1[segment.index])
        inputs = [self.sent[p] if p == self.me else self.received[p] for p in range(self.n)]
        self.codec.decode_average_with_stats(inputs, self.n, self.ws.own, self.stats, average=self.average,
                                             begin=segment.begin, end=segment.end)

    def _round2(self) -> None:
        """The averaged own chunk (``ws.own``, its min/max in ``stats``), compressed again, to every rank;
        every rank's chunk decoded into ``flat``. Waits for round 1's sends too."""
        codec, ws, flat, me, chunk = self.codec, self.ws, self.flat, self.me, self.ws.chunk
        own = self.gathered[me]
        codec.encode_headers_with_stats(ws.own, 1, own, self.stats, nonfinite=self.nonfinite)
        record_payload("allgather", own)
        # a codec with a fused encode_range_decoding decodes the own chunk while encoding it (its part of flat:
        # shorter, or empty, past the end); for the others, decoding it there would delay every send, so it
        # is decoded with the peers' chunks, behind the wire
        fused = type(codec).encode_range_decoding is not Codec.encode_range_decoding
        own_values = flat[min(flat.numel(), me * chunk) : min(flat.numel(), (me + 1) * chunk)]
        decoded = self.peers if fused else range(self.n)
        targets = [(p, own) for p in self.peers]
        for encode, decode in schedule(self.segs):
            if encode is not None:
                if fused:
                    codec.encode_range_decoding(ws.own, own, encode.begin, encode.end, own_values)
                else:
                    codec.encode_range(ws.own, 1, own, encode.begin, encode.end)
                self.sends += send_segment(self.comm, encode, targets, _TAG + _ROUND2)
            if decode is not None:
                wait_all(self.received2[decode.index])
                for p in decoded:
                    self._decode_chunk(self.gathered[p], p, decode)
        wait_all(self.sends)
        self.sends = []

    def _decode_chunk(self, slot: torch.Tensor, p: int, segment: Segment) -> None:
        """Decode segment ``segment`` of chunk ``p`` (its one-chunk ``slot``) into ``flat``."""
        codec, ws, flat, chunk = self.codec, self.ws, self.flat, self.ws.chunk
        start, stop = p * chunk, min(flat.numel(), (p + 1) * chunk)
        if stop - start == chunk:
            codec.decode(slot, 1, flat[start:stop], begin=segment.begin, end=segment.end)
        elif stop > start + segment.begin:  # the last chunk is short: its slot describes `chunk` values
            if getattr(ws, "scratch", None) is None or ws.scratch.numel() != chunk:
                ws.scratch = torch.empty(chunk, dtype=torch.float32)
            codec.decode(slot, 1, ws.scratch, begin=segment.begin, end=segment.end)
            end = min(segment.end, stop - start)
            flat[start + segment.begin : start + end].copy_(ws.scratch[segment.begin : end])
