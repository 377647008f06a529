"""bytegrad's pipelined exchange engine: encode, send and decode a payload segment by segment, so that
encoding, the wire and decoding overlap.

The engine is data and a few point-to-point helpers; the operation that uses it runs the loop, so
nothing here calls back into an algorithm. A payload is split into *segments* (:func:`segments`):
chunk-local element ranges and the bytes of a slot that carry them. The receives of a round are posted
first (:func:`post_receives`: gloo sends a message only once its receive is posted, so this saves a
one-way latency per message). Then :func:`schedule` says, step by step, which segment to encode and
send next and which received segment to decode: decoding runs ``LAG`` segments behind the encoding,
so it overlaps the wire while later segments are still being encoded. :func:`send_segment` sends one
segment's bytes to every destination (tag ``tag + segment.index``); :func:`wait_all` waits for works.
bytegrad's alltoall and allgather rounds (:mod:`.compressed_pipeline`) are loops over this engine with the
steps of a codec (:class:`bagua_core.codecs.Codec`); the package exports it (``__init__``) for another
package's compressed exchange (low_precision_decentralized's ring is one).

Example (send the same compressed payload to both ring neighbours, decode what arrives)::

    >>> segs = segments(numel, codec.encoded_size(numel, 1), codec.header_bytes, codec.bytes_per_element)
    >>> received = post_receives(comm, segs, [(left, from_left), (right, from_right)], TAG)
    >>> sends = []
    >>> for encode, decode in schedule(segs):
    ...     if encode is not None:
    ...         codec.encode_range(z, 1, mine, encode.begin, encode.end)
    ...         sends += send_segment(comm, encode, [(left, mine), (right, mine)], TAG)
    ...     if decode is not None:
    ...         wait_all(received[decode.index])
    ...         update(decode.begin, decode.end)
    >>> wait_all(sends)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist

from bagua_core.api import BaguaCommunicator

__all__ = ["LAG", "SEGMENT_NUMEL", "Segment", "post_receives", "schedule", "segments", "send_segment", "wait_all"]

SEGMENT_NUMEL = 1 << 19
"""Elements of a chunk encoded and sent together (512 KiB of one-byte codes per message)."""
LAG = 4
"""Segments posted ahead of the one being decoded: they keep the link busy while it is decoded."""


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


def post_receives(comm: BaguaCommunicator, segs: Sequence[Segment], sources: Sequence[tuple[int, torch.Tensor]],
                  tag: int) -> list[list]:
    """Post now, for every segment, the receives from every source: ``(peer, slot)``, ``peer`` a rank of
    ``comm`` and ``slot`` the contiguous uint8 tensor the peer's slot arrives in (segment ``s`` into
    ``slot[s.lo:s.hi]``, tag ``tag + s.index``). gloo starts sending a message only once the receiver
    has posted its receive, so posting them all before the round (and a later round's before an earlier
    one runs) saves a one-way latency per message. Returns the works of each segment, by index."""
    group = comm.torch_group
    return [[dist.irecv(slot[s.lo : s.hi], group=group, tag=tag + s.index, group_src=comm.group_rank(peer))
             for peer, slot in sources] for s in segs]


def send_segment(comm: BaguaCommunicator, segment: Segment, targets: Sequence[tuple[int, torch.Tensor]],
                 tag: int) -> list:
    """Send ``slot[segment.lo:segment.hi]`` to every ``(peer, slot)`` of ``targets`` (tag ``tag +
    segment.index``), without waiting. Returns the works in flight: :func:`wait_all` them before the
    slots are written again."""
    return [dist.isend(slot[segment.lo : segment.hi], group=comm.torch_group, group_dst=comm.group_rank(peer),
                       tag=tag + segment.index) for peer, slot in targets]


def schedule(segs: Sequence[Segment], lag: int | None = None) -> Iterator[tuple[Segment | None, Segment | None]]:
    """The steps of one pipelined round, ``(encode, decode)``: encode and send segment ``encode`` (None:
    nothing left to send), then wait for the receives of segment ``decode`` and decode it (None: nothing
    to decode yet). Decoding runs ``lag`` (default :data:`LAG`) segments behind the encoding, in order;
    every segment is encoded once and decoded once. With ``lag=len(segs)`` every segment is sent before
    any is decoded.

    Example::

        >>> [(e and e.index, d and d.index) for e, d in schedule(segments(4, 12, 8, 1, 1), lag=1)]
        [(0, None), (1, 0), (2, 1), (3, 2), (None, 3)]
    """
    lag = LAG if lag is None else lag
    for i, segment in enumerate(segs):
        yield segment, (segs[i - lag] if i >= lag else None)
    for segment in segs[max(0, len(segs) - lag):]:
        yield None, segment


def wait_all(works: Sequence) -> None:
    """Wait for every work of ``works``."""
    for work in works:
        work.wait()
