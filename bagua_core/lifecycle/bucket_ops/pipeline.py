"""The pipelined exchange that every compressed operation shares: encode, send and decode a payload
segment by segment, so that encoding, the wire and decoding overlap.

A payload is split into *segments* (:func:`segments`): chunk-local element ranges and the bytes of a
slot that carry them. The receives of a round are posted first (:func:`post_receives`: gloo sends a
message only once its receive is posted, so this saves a one-way latency per message); then one
*round* (:func:`exchange_round`) runs, for segment i = 0, 1, ...: ``encode(segment)`` (fill the bytes
the sends of segment i read), non-blocking sends to every destination peer (tag ``tag + i``), and
``decode`` (after waiting for its receives) of the segment ``LAG`` places behind, so decoding overlaps
the wire while later segments are still being encoded. What to send, where to receive and the
encode/decode steps are arguments: bytegrad's alltoall and allgather rounds, qadam's momentum
exchange (the same op) and low_precision_decentralized's neighbour exchange are all rounds of this
one function (in their packages), with the steps of a codec (:class:`bagua_core.codecs.Codec`, its
fused steps where it has them). A round can also run in two halves, :func:`send_round` now and
:func:`decode_round` later, for an operation that leaves its receives in flight while later buckets
start (bytegrad's alltoall).

Example (send the same compressed payload to both ring neighbours, decode what arrives)::

    >>> segs = segments(numel, codec.encoded_size(numel, 1))
    >>> received = post_receives(comm, segs, [(left, lambda s: from_left[s.lo:s.hi]), ...], TAG)
    >>> sends = exchange_round(comm, segs, [(left, lambda s: mine[s.lo:s.hi]), (right, ...)], received,
    ...                        encode=lambda s: codec.encode_range(z, 1, mine, s.begin, s.end),
    ...                        decode=lambda s: update(s.begin, s.end), tag=TAG)
    >>> wait_all(sends)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist

from bagua_core.runtime.communication.communicator import BaguaCommunicator

__all__ = ["LAG", "SEGMENT_NUMEL", "Segment", "decode_round", "exchange_round", "post_receives", "segments", "send_round",
           "wait_all"]

SEGMENT_NUMEL = 1 << 19
"""Elements of a chunk encoded and sent together (512 KiB of uint8 per message with MinMaxUInt8)."""
LAG = 4
"""Segments posted ahead of the one being decoded: they keep the link busy while it is decoded."""

Piece = Callable[["Segment"], torch.Tensor]


class Segment(NamedTuple):
    """Segment ``index`` of a chunk: its elements [begin, end) and the slot bytes [lo, hi) that carry
    them (the header goes with the first segment, the padding with the last)."""

    index: int
    begin: int
    end: int
    lo: int
    hi: int


def segments(chunk_numel: int, slot_bytes: int, header_bytes: int = 8, bytes_per_element: float = 1,
             segment_numel: int | None = None) -> list[Segment]:
    """The segments of a chunk of ``chunk_numel`` elements stored in a slot of ``slot_bytes`` bytes
    (``header_bytes`` first, then ``bytes_per_element`` per element, then padding). Below one byte per
    element, segments start at whole bytes (multiples of 8 elements)."""
    step = segment_numel or SEGMENT_NUMEL
    bits = round(bytes_per_element * 8)
    if bits % 8:
        step = max(8, step - step % 8)
    bounds = list(range(0, chunk_numel, step)) + [chunk_numel]
    if len(bounds) == 1:  # an empty chunk: one segment carrying the header and padding
        return [Segment(0, 0, 0, 0, slot_bytes)]
    out = []
    last = len(bounds) - 2
    for i, (b, e) in enumerate(zip(bounds, bounds[1:])):
        lo = 0 if i == 0 else header_bytes + b * bits // 8
        hi = slot_bytes if i == last else header_bytes + e * bits // 8
        out.append(Segment(i, b, e, lo, hi))
    return out


def post_receives(comm: BaguaCommunicator, segs: Sequence[Segment], recvs: Sequence[tuple[int, Piece]],
                  tag: int) -> list[list]:
    """Post now, for every segment, the receives from every source peer (``(peer, piece)``: ``peer`` a
    rank of ``comm``, ``piece(segment)`` the contiguous uint8 tensor the segment arrives in; tag
    ``tag + segment.index``). gloo starts sending a message only once the receiver has posted its
    receive, so posting them all before the round (and a later round's before an earlier one runs)
    saves a one-way latency per message. Returns the works of each segment, for :func:`exchange_round`."""
    group = comm.torch_group
    return [[dist.irecv(piece(s), comm.global_rank(peer), group=group, tag=tag + s.index) for peer, piece in recvs]
            for s in segs]


def exchange_round(comm: BaguaCommunicator, segs: Sequence[Segment], sends: Sequence[tuple[int, Piece]],
                   received: Sequence[Sequence], encode: Callable[[Segment], None],
                   decode: Callable[[Segment], None], tag: int) -> list:
    """One pipelined round over ``comm``: for each segment, ``encode`` it, then send ``piece(segment)``
    to every ``(peer, piece)`` of ``sends`` (tag ``tag + segment.index``); ``decode`` each segment once
    its receives (``received``, from :func:`post_receives` with the same segments and tag) completed,
    ``LAG`` segments behind the encoding and in order. Every rank must run the same segments with the
    same ``tag``. Returns the sends, possibly still in flight: :func:`wait_all` them before the send
    buffers are written again."""
    pending: list[tuple[Segment, Sequence]] = []
    in_flight: list = []

    def decode_oldest() -> None:
        segment, works = pending.pop(0)
        wait_all(works)
        decode(segment)

    for segment, works in zip(segs, received):
        encode(segment)
        in_flight += _send(comm, segment, sends, tag)
        pending.append((segment, works))
        if len(pending) > LAG:
            decode_oldest()
    while pending:
        decode_oldest()
    return in_flight


def send_round(comm: BaguaCommunicator, segs: Sequence[Segment], sends: Sequence[tuple[int, Piece]],
               encode: Callable[[Segment], None], tag: int) -> list:
    """The sending half of a round, for an operation that leaves its receives for later (a bucket op
    that defers, ``BaguaBucket.may_defer``): ``encode`` each segment and send ``piece(segment)`` to every
    ``(peer, piece)`` (tag ``tag + segment.index``), without waiting for anything. Returns the sends in
    flight; :func:`decode_round` finishes the receiving half."""
    in_flight: list = []
    for segment in segs:
        encode(segment)
        in_flight += _send(comm, segment, sends, tag)
    return in_flight


def _send(comm: BaguaCommunicator, segment: Segment, sends: Sequence[tuple[int, Piece]], tag: int) -> list:
    """``piece(segment)`` to every ``(peer, piece)``, tag ``tag + segment.index``; the works in flight."""
    return [dist.isend(piece(segment), comm.global_rank(peer), group=comm.torch_group, tag=tag + segment.index)
            for peer, piece in sends]


def decode_round(segs: Sequence[Segment], received: Sequence[Sequence], decode: Callable[[Segment], None]) -> None:
    """The receiving half of a round: ``decode`` each segment, in order, once its receives (from
    :func:`post_receives`) completed."""
    for segment, works in zip(segs, received):
        wait_all(works)
        decode(segment)


def wait_all(works: Sequence) -> None:
    """Wait for every work of ``works`` (the sends :func:`exchange_round` returned)."""
    for work in works:
        work.wait()
