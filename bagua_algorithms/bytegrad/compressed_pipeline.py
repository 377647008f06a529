"""The bytegrad exchange pipelined: two rounds of the core's pipelined exchange
(``bagua_core.lifecycle.bucket_ops.pipeline``), with the codec's steps (:class:`bagua_core.codecs.Codec`: its fused
ones where it has them, MinMaxUInt8's native kernels by default).

Same bytes and results as the plain exchange (``bagua_algorithms.bytegrad.compressed``), in two halves.
:func:`start_pipelined_exchange` posts the receives of both rounds and sends round 1 (the alltoall):
every chunk's header (min/max) is written first, so each segment of the payload is final as soon as
it is encoded and goes on the wire (chunk j to rank j) while the next one is encoded. The ``finish``
it returns decodes the received segments and averages them in fp32 into the own chunk, gathering the
min/max of the average in the same pass, then runs round 2 (the allgather): the averaged own chunk's
header comes from those min/max (no second pass over it); each segment is encoded, decoded into the
tensor in the same pass (the own chunk is never decoded again), and sent to every rank; the other
ranks' segments are decoded into the tensor as they arrive. Between the two halves the bucket op
lets later buckets start (``BaguaBucket.may_defer``): their round 1 fills the link while this rank
waits for the slowest peer's chunk, which round 2 needs. Only for fp32 tensors on the CPU (other
tensors take the plain path). qadam's momentum exchange is this same exchange.

Example::

    >>> finish = start_pipelined_exchange(flat, comm, True, workspace, pieces, codec)  # None: not applicable
    >>> finish()                                                                        # flat is the average
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from bagua_core.lifecycle.bucket_ops.pipeline import (Segment, decode_round, exchange_round, post_receives, segments,
                                                      send_round, wait_all)
from bagua_core.runtime import env
from bagua_core.codecs import Codec
from bagua_core.runtime.communication.common import record
from bagua_core.runtime.communication.communicator import BaguaCommunicator

if TYPE_CHECKING:  # pragma: no cover
    from bagua_algorithms.bytegrad.workspace import CompressedWorkspace

__all__ = ["start_pipelined_exchange"]

_TAG = 0x6267_0000
"""Point-to-point tags of round 1: ``_TAG`` + segment index; round 2's start at ``_TAG + _ROUND2``."""
_ROUND2 = 1 << 15
"""Round 2's tags never equal round 1's, whatever the buckets' segment counts: with several buckets in
flight a rank sends a later bucket's round 1 before an earlier bucket's round 2, and a receive is
matched to the first posted receive of its peer and tag."""


def _decode_chunk(codec: Codec, slot: torch.Tensor, flat: torch.Tensor, p: int, ws: CompressedWorkspace,
                  segment: Segment) -> None:
    """Decode segment ``segment`` of chunk ``p`` (its one-chunk ``slot``) into ``flat``."""
    chunk = ws.chunk
    start, stop = p * chunk, min(flat.numel(), (p + 1) * chunk)
    if stop - start == chunk:
        codec.decode(slot, 1, flat[start:stop], begin=segment.begin, end=segment.end)
    elif stop > start + segment.begin:  # the last chunk is short: its slot describes `chunk` values
        if getattr(ws, "scratch", None) is None or ws.scratch.numel() != chunk:
            ws.scratch = torch.empty(chunk, dtype=torch.float32)
        codec.decode(slot, 1, ws.scratch, begin=segment.begin, end=segment.end)
        end = min(segment.end, stop - start)
        flat[start + segment.begin : start + end].copy_(ws.scratch[segment.begin : end])


def start_pipelined_exchange(flat: torch.Tensor, comm: BaguaCommunicator, average: bool, ws: CompressedWorkspace,
                             pieces: list[tuple[torch.Tensor, int, torch.Tensor]], codec: Codec,
                             defer: bool = False) -> Callable[[], None] | None:
    """The exchange of ``flat`` (fp32, CPU, more than one rank) in place; None (nothing done) for other
    tensors. ``pieces``: ``(values, chunks, slots)`` that encode into ``ws.sent``. Without ``defer``, all
    of it, round 1's segments decoded while later ones travel; returns a function that does nothing.
    With ``defer``: posts both rounds' receives and sends round 1, and returns what finishes it (call it
    once, before ``flat`` or the workspace are used again)."""
    if flat.dtype != torch.float32 or flat.device.type != "cpu":
        return None
    n, me, chunk = comm.nranks(), comm.rank(), ws.chunk
    slot = ws.sent.numel() // n
    sent, received, gathered = ws.sent.view(n, slot), ws.received.view(n, slot), ws.gathered.view(n, slot)
    segs = segments(chunk, slot, codec.header_bytes, codec.bytes_per_element)
    if len(segs) > _ROUND2:  # pragma: no cover - 2**34 values per rank
        raise ValueError(f"a bytegrad chunk of {chunk} values needs {len(segs)} segments, at most {_ROUND2}")
    nonfinite = env.get_nonfinite_policy()
    peers = [p for p in range(n) if p != me]

    # both rounds' receives first: the peers' segments can be sent as soon as they are encoded
    received1 = post_receives(comm, segs, [(p, lambda s, p=p: received[p, s.lo : s.hi]) for p in peers], _TAG)
    received2 = post_receives(comm, segs, [(p, lambda s, p=p: gathered[p, s.lo : s.hi]) for p in peers],
                              _TAG + _ROUND2)

    # round 1: chunk j to rank j; the own chunk is read from the send buffer
    for values, chunks, slots in pieces:
        codec.encode_headers(values, chunks, slots, nonfinite=nonfinite)
    record("alltoall", ws.sent)
    stats = codec.new_stats()
    inputs = [sent[p] if p == me else received[p] for p in range(n)]
    targets = [(p, lambda s, p=p: sent[p, s.lo : s.hi]) for p in peers]

    def encode_chunks(s: Segment) -> None:
        for values, chunks, slots in pieces:
            codec.encode_range(values, chunks, slots, s.begin, s.end)

    def decode_average(s: Segment) -> None:
        codec.decode_average_with_stats(inputs, n, ws.own, stats, average=average, begin=s.begin, end=s.end)

    if not defer:  # measured: sending every segment before decoding any cost 6-16% on 2 hosts at 1 Gbit/s
        sends = exchange_round(comm, segs, targets, received1, encode_chunks, decode_average, _TAG)
        _allgather_round(flat, comm, ws, codec, segs, received2, stats, sends)
        return _nothing

    sends = send_round(comm, segs, targets, encode_chunks, _TAG)

    def finish() -> None:
        decode_round(segs, received1, decode_average)
        _allgather_round(flat, comm, ws, codec, segs, received2, stats, sends)

    return finish


def _nothing() -> None:
    return None


def _allgather_round(flat: torch.Tensor, comm: BaguaCommunicator, ws: CompressedWorkspace, codec: Codec,
                     segs: list[Segment], received2: list, stats, sends: list) -> None:
    """Round 2: the averaged own chunk (``ws.own``, its min/max in ``stats``), compressed again, to every
    rank; every rank's chunk decoded into ``flat``. Waits for ``sends`` (round 1's) too."""
    n, me, chunk = comm.nranks(), comm.rank(), ws.chunk
    gathered = ws.gathered.view(n, ws.sent.numel() // n)
    peers = [p for p in range(n) if p != me]
    own = gathered[me]
    codec.encode_headers_with_stats(ws.own, 1, own, stats, nonfinite=env.get_nonfinite_policy())
    record("allgather", own)
    # a codec with a fused encode_range_decoding decodes the own chunk while encoding it (its part of flat:
    # shorter, or empty, past the end); for the others, decoding it there would delay every send, so it
    # is decoded with the peers' chunks, behind the wire
    fused = type(codec).encode_range_decoding is not Codec.encode_range_decoding
    own_values = flat[min(flat.numel(), me * chunk) : min(flat.numel(), (me + 1) * chunk)]
    decoded = peers if fused else range(n)

    def encode_own(s: Segment) -> None:
        if fused:
            codec.encode_range_decoding(ws.own, own, s.begin, s.end, own_values)
        else:
            codec.encode_range(ws.own, 1, own, s.begin, s.end)

    def decode_chunks(s: Segment) -> None:
        for p in decoded:
            _decode_chunk(codec, gathered[p], flat, p, ws, s)

    sends = sends + exchange_round(comm, segs, [(p, lambda s: own[s.lo : s.hi]) for p in peers], received2,
                                   encode_own, decode_chunks, _TAG + _ROUND2)
    wait_all(sends)
