"""The bytegrad exchange pipelined: two rounds of the core's pipelined exchange
(``bagua_core.lifecycle.bucket_ops.pipeline``), with the codec's steps (:class:`bagua_core.codecs.Codec`: its fused
ones where it has them, MinMaxUInt8's native kernels by default).

Same bytes and results as the plain exchange (``bagua_algorithms.bytegrad.compressed``). The receives
of both rounds are posted first. Round 1 (the
alltoall): every chunk's header (min/max) is written first, so each segment of the payload is final
as soon as it is encoded and goes on the wire (chunk j to rank j) while the next one is encoded;
received segments are decoded and averaged in fp32 into the own chunk while later ones travel, and
the min/max of the average is gathered in the same pass. Round 2 (the allgather): the averaged own
chunk's header comes from those min/max (no second pass over it); each segment is encoded, decoded
into the tensor in the same pass (the own chunk is never decoded again), and sent to every rank;
the other ranks' segments are decoded into the tensor as they arrive. Only for fp32 tensors on the
CPU (other tensors take the plain path). qadam's momentum exchange is this same exchange.

Example::

    >>> pipelined_exchange(flat, comm, True, workspace, pieces)   # True: done; False: not applicable
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bagua_core.lifecycle.bucket_ops.pipeline import Segment, exchange_round, post_receives, segments, wait_all
from bagua_core.runtime import env
from bagua_core.codecs import Codec
from bagua_core.runtime.communication.common import record
from bagua_core.runtime.communication.communicator import BaguaCommunicator

if TYPE_CHECKING:  # pragma: no cover
    from bagua_algorithms.bytegrad.workspace import CompressedWorkspace

__all__ = ["pipelined_exchange"]

_TAG = 0x6267_0000  # point-to-point tags of the exchange: _TAG + segment index (+ segments in round 2)


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


def pipelined_exchange(flat: torch.Tensor, comm: BaguaCommunicator, average: bool, ws: CompressedWorkspace,
                       pieces: list[tuple[torch.Tensor, int, torch.Tensor]], codec: Codec) -> bool:
    """Runs the whole exchange of ``flat`` (fp32, CPU, more than one rank) in place; False (nothing
    done) for other tensors. ``pieces``: ``(values, chunks, slots)`` that encode into ``ws.sent``."""
    if flat.dtype != torch.float32 or flat.device.type != "cpu":
        return False
    n, me, chunk = comm.nranks(), comm.rank(), ws.chunk
    slot = ws.sent.numel() // n
    sent, received, gathered = ws.sent.view(n, slot), ws.received.view(n, slot), ws.gathered.view(n, slot)
    segs = segments(chunk, slot, codec.header_bytes, codec.bytes_per_element)
    nonfinite = env.get_nonfinite_policy()
    peers = [p for p in range(n) if p != me]

    # both rounds' receives first: the peers' segments can be sent as soon as they are encoded
    received1 = post_receives(comm, segs, [(p, lambda s, p=p: received[p, s.lo : s.hi]) for p in peers], _TAG)
    received2 = post_receives(comm, segs, [(p, lambda s, p=p: gathered[p, s.lo : s.hi]) for p in peers],
                              _TAG + len(segs))

    # round 1: chunk j to rank j; the own chunk is read from the send buffer
    for values, chunks, slots in pieces:
        codec.encode_headers(values, chunks, slots, nonfinite=nonfinite)
    record("alltoall", ws.sent)
    stats = codec.new_stats()
    inputs = [sent[p] if p == me else received[p] for p in range(n)]

    def encode_chunks(s: Segment) -> None:
        for values, chunks, slots in pieces:
            codec.encode_range(values, chunks, slots, s.begin, s.end)

    sends = exchange_round(
        comm, segs, [(p, lambda s, p=p: sent[p, s.lo : s.hi]) for p in peers], received1, encode_chunks,
        lambda s: codec.decode_average_with_stats(inputs, n, ws.own, stats, average=average, begin=s.begin, end=s.end),
        _TAG,
    )

    # round 2: the averaged own chunk, compressed again, to every rank
    own = gathered[me]
    codec.encode_headers_with_stats(ws.own, 1, own, stats, nonfinite=nonfinite)
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

    sends += exchange_round(
        comm, segs, [(p, lambda s: own[s.lo : s.hi]) for p in peers], received2, encode_own, decode_chunks,
        _TAG + len(segs),
    )
    wait_all(sends)
    return True
