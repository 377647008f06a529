"""The pipelined exchange that every compressed operation shares: encode, send and decode a payload
segment by segment, so that encoding, the wire and decoding overlap.

A payload is split into *segments* (:func:`segments`): chunk-local element ranges and the bytes of a
slot that carry them. One *round* (:func:`exchange_round`) runs, for segment i = 0, 1, ...:
``encode(segment)`` (fill the bytes the sends of segment i read), then posts non-blocking receives of
that segment from every source peer and sends to every destination peer (tag ``tag + i``), and
decodes (``decode(segment)``, after waiting for its receives) the segment ``LAG`` places behind, so
decoding overlaps the wire while later segments are still being encoded. What to send, where to
receive and the encode/decode steps are arguments: bytegrad's alltoall and allgather rounds, qadam's
momentum exchange (the same op) and low_precision_decentralized's neighbour exchange are all rounds
of this one function, with the codec's kernels (``bagua_core.bucket_ops.segment_codec``) as the steps.

Example (send the same compressed payload to both ring neighbours, decode what arrives)::

    >>> segs = segments(numel, codec.slot_bytes(numel, 1))
    >>> sends = exchange_round(comm, segs, [(left, lambda s: mine[s.lo:s.hi]), (right, ...)],
    ...                        [(left, lambda s: from_left[s.lo:s.hi]), ...],
    ...                        encode=lambda s: codec.encode(z, 1, mine, s.begin, s.end),
    ...                        decode=lambda s: update(s.begin, s.end), tag=TAG)
    >>> wait_all(sends)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist

from bagua_core.communication.communicator import BaguaCommunicator

__all__ = ["LAG", "SEGMENT_NUMEL", "Segment", "exchange_round", "segments", "wait_all"]

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


def segments(chunk_numel: int, slot_bytes: int, header_bytes: int = 8, bytes_per_element: int = 1,
             segment_numel: int | None = None) -> list[Segment]:
    """The segments of a chunk of ``chunk_numel`` elements stored in a slot of ``slot_bytes`` bytes
    (``header_bytes`` first, then ``bytes_per_element`` per element, then padding)."""
    step = segment_numel or SEGMENT_NUMEL
    bounds = list(range(0, chunk_numel, step)) + [chunk_numel]
    if len(bounds) == 1:  # an empty chunk: one segment carrying the header and padding
        return [Segment(0, 0, 0, 0, slot_bytes)]
    out = []
    last = len(bounds) - 2
    for i, (b, e) in enumerate(zip(bounds, bounds[1:])):
        lo = 0 if i == 0 else header_bytes + b * bytes_per_element
        hi = slot_bytes if i == last else header_bytes + e * bytes_per_element
        out.append(Segment(i, b, e, lo, hi))
    return out


def _post(comm: BaguaCommunicator, segment: Segment, sends: Sequence[tuple[int, Piece]],
          recvs: Sequence[tuple[int, Piece]], tag: int) -> tuple[list, list]:
    group, tag = comm.torch_group, tag + segment.index
    posted_recvs = [dist.irecv(piece(segment), comm.global_rank(peer), group=group, tag=tag) for peer, piece in recvs]
    posted_sends = [dist.isend(piece(segment), comm.global_rank(peer), group=group, tag=tag) for peer, piece in sends]
    return posted_recvs, posted_sends


def exchange_round(comm: BaguaCommunicator, segs: Sequence[Segment], sends: Sequence[tuple[int, Piece]],
                   recvs: Sequence[tuple[int, Piece]], encode: Callable[[Segment], None],
                   decode: Callable[[Segment], None], tag: int) -> list:
    """One pipelined round over ``comm``. ``sends``/``recvs``: ``(peer, piece)`` with ``peer`` a rank
    of ``comm`` and ``piece(segment)`` the contiguous uint8 tensor sent to / received from it for that
    segment. Every rank must run the same segments with the same ``tag`` (tags ``tag .. tag + len(segs) - 1``
    are used). Returns the sends, possibly still in flight: :func:`wait_all` them before the send
    buffers are written again."""
    pending: list[tuple[Segment, list]] = []
    in_flight: list = []

    def decode_oldest() -> None:
        segment, works = pending.pop(0)
        for work in works:
            work.wait()
        decode(segment)

    for segment in segs:
        encode(segment)
        posted_recvs, posted_sends = _post(comm, segment, sends, recvs, tag)
        pending.append((segment, posted_recvs))
        in_flight += posted_sends
        if len(pending) > LAG:
            decode_oldest()
    while pending:
        decode_oldest()
    return in_flight


def wait_all(works: Sequence) -> None:
    """Wait for every work of ``works`` (the sends :func:`exchange_round` returned)."""
    for work in works:
        work.wait()
