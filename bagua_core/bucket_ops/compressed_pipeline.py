"""The bytegrad exchange pipelined: each chunk is quantised, sent, and averaged in segments.

Same bytes and results as the plain exchange (``bagua_core.bucket_ops.compressed``): every chunk's
fp32 min/max is computed first (``compress_minmax_uint8_headers``), so each segment of the uint8
payload is final as soon as it is quantised and goes on the wire (non-blocking point-to-point sends
of uint8, the slot header with the first segment) while the next one is quantised; received segments
are decompressed and averaged in fp32 while later ones are still travelling. The averaged own chunk
is then compressed again (min/max first) and sent to every rank in segments the same way, and each
rank decompresses the segments of all chunks into the tensor as they arrive. Only for fp32 tensors
on the CPU (other tensors take the plain path).

Example::

    >>> pipelined_exchange(flat, comm, True, workspace, pieces)   # True: done; False: not applicable
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from bagua_core import env, native
from bagua_core.communication.common import record
from bagua_core.communication.communicator import BaguaCommunicator

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.bucket_ops.compressed import CompressedWorkspace

__all__ = ["SEGMENT_NUMEL", "pipelined_exchange"]

SEGMENT_NUMEL = 1 << 19
"""Elements of a chunk quantised and sent together (512 KiB of uint8 per message)."""
_TAG = 0x6267_0000  # point-to-point tags of the exchange: _TAG + segment index (+ segments in phase 2)


def _segments(chunk: int, slot: int) -> list[tuple[int, int, int, int]]:
    """``(begin, end, first_byte, last_byte)`` per segment: chunk-local elements and the slot bytes
    that carry them (the header goes with the first segment, the zero padding with the last)."""
    bounds = list(range(0, chunk, SEGMENT_NUMEL)) + [chunk]
    out = []
    for i, (b, e) in enumerate(zip(bounds, bounds[1:])):
        out.append((b, e, 0 if i == 0 else 8 + b, slot if i == len(bounds) - 2 else 8 + e))
    return out


def _exchange_segment(comm: BaguaCommunicator, send: torch.Tensor | None, recv: torch.Tensor, lo: int, hi: int,
                      tag: int) -> tuple[list, list]:
    """Post, for every peer p, a receive of ``recv[p, lo:hi]`` and (``send`` given) a send of
    ``send[lo:hi]`` (one slot) or of ``send[p, lo:hi]`` (one slot per peer)."""
    me, group = comm.rank(), comm.torch_group
    recvs, sends = [], []
    for peer in range(comm.nranks()):
        if peer == me:
            continue
        rank = comm.global_rank(peer)
        recvs.append(dist.irecv(recv[peer, lo:hi], rank, group=group, tag=tag))
        if send is not None:
            piece = send[lo:hi] if send.dim() == 1 else send[peer, lo:hi]
            sends.append(dist.isend(piece, rank, group=group, tag=tag))
    return recvs, sends


def pipelined_exchange(flat: torch.Tensor, comm: BaguaCommunicator, average: bool, ws: CompressedWorkspace,
                       pieces: list[tuple[torch.Tensor, int, torch.Tensor]]) -> bool:
    """Runs the whole exchange of ``flat`` (fp32, CPU, more than one rank) in place; False (nothing
    done) for other tensors. ``pieces``: ``(values, chunks, slots)`` that compress into ``ws.sent``."""
    if flat.dtype != torch.float32 or flat.device.type != "cpu":
        return False
    n, me = comm.nranks(), comm.rank()
    slot = ws.sent.numel() // n
    sent, received, gathered = ws.sent.view(n, slot), ws.received.view(n, slot), ws.gathered.view(n, slot)
    segments = _segments(ws.chunk, slot)
    # phase 1: chunk j to rank j, segment by segment; the own chunk is read from the send buffer
    nonfinite = env.get_nonfinite_policy()  # "propagate": a chunk with NaN/Inf arrives as NaN everywhere
    for values, chunks, slots in pieces:
        native.compress_minmax_uint8_headers(values, chunks, slots, nonfinite=nonfinite)
    record("alltoall", ws.sent)
    posted = []
    for i, (b, e, lo, hi) in enumerate(segments):
        for values, chunks, slots in pieces:
            native.quantise_minmax_uint8(values, chunks, slots, b, e)
        posted.append(_exchange_segment(comm, sent, received, lo, hi, _TAG + i))
    inputs = [sent[p] if p == me else received[p] for p in range(n)]
    for (b, e, _, _), (recvs, _) in zip(segments, posted):
        for work in recvs:
            work.wait()
        native.decompress_average_minmax_uint8(inputs, n, ws.own, average, begin=b, end=e)
    # phase 2: the averaged own chunk, compressed again, to every rank
    own = gathered[me]
    native.compress_minmax_uint8_headers(ws.own, 1, own, nonfinite=nonfinite)
    record("allgather", own)
    posted2 = []
    for i, (b, e, lo, hi) in enumerate(segments):
        native.quantise_minmax_uint8(ws.own, 1, own, b, e)
        posted2.append(_exchange_segment(comm, own, gathered, lo, hi, _TAG + len(segments) + i))
    for (b, e, _, _), (recvs, _) in zip(segments, posted2):
        for work in recvs:
            work.wait()
        native.decompress_minmax_uint8(ws.gathered, n, flat, begin=b, end=e)
    for _, sends in posted + posted2:
        for work in sends:
            work.wait()
    return True
