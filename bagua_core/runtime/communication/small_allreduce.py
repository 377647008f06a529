"""Allreduce of small tensors on gloo: recursive doubling over point-to-point messages.

gloo's allreduce queues each call to one of the process group's worker threads and runs a ring of
``2 (n - 1)`` steps; for a few KiB the thread hand-offs dominate (2 loopback ranks of a 2-core host,
back to back: 400-1200 us for 1-64 KiB against 150-300 us here; ``make bench-overhead`` shows the
step time with it, ``bagua``, and without it, ``bagua_ring``).
Here the calling thread exchanges the whole tensor with a partner in ``log2(p)`` rounds (``p``, the
largest power of two <= n; the ``n - p`` other ranks first fold into rank ``r - p`` and get the result
back at the end). Above the threshold, where bandwidth matters, gloo's ring is used.

Every combination is computed as ``op(lower rank's value, higher rank's value)``, so both partners of
a round compute the same expression and every rank ends bit-identical, whatever the operator.
The threshold (``BAGUA_SMALL_ALLREDUCE_BYTES``, 0 turns it off) is agreed by all ranks when the process
group starts: different values on different ranks would pair an allreduce with point-to-point messages.

Example::

    >>> t = torch.full((4,), float(rank + 1))
    >>> small_allreduce_inplace(t, ReduceOp.SUM, comm)     # 3 ranks: [6., 6., 6., 6.] on each
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from bagua_core.runtime.communication.reduce_op import ReduceOp

__all__ = ["small_allreduce_inplace", "COMBINE", "TAG", "threshold_bytes"]

threshold_bytes = 0
"""Largest allreduce (bytes) taken by this path; set by ``init_process_group`` to the agreed
``BAGUA_SMALL_ALLREDUCE_BYTES``, 0 (gloo for everything) until then."""

TAG = 0x62A6
"""Tag of the messages, apart from tag 0 of the user's ``send``/``recv``."""

COMBINE: dict[ReduceOp, Callable[..., torch.Tensor]] = {
    ReduceOp.SUM: torch.add,
    ReduceOp.AVG: torch.add,  # the division follows, on every rank alike
    ReduceOp.PRODUCT: torch.mul,
    ReduceOp.MIN: torch.minimum,
    ReduceOp.MAX: torch.maximum,
    ReduceOp.BOR: torch.bitwise_or,
    ReduceOp.BAND: torch.bitwise_and,
    ReduceOp.BXOR: torch.bitwise_xor,
}


def _exchange(tensor: torch.Tensor, scratch: torch.Tensor, peer: int, group: dist.ProcessGroup) -> None:
    sent = dist.isend(tensor, group=group, tag=TAG, group_dst=peer)
    received = dist.irecv(scratch, group=group, tag=TAG, group_src=peer)
    received.wait()
    sent.wait()


def _recv(tensor: torch.Tensor, peer: int, group: dist.ProcessGroup) -> None:
    # not dist.recv: it returns the sender's global rank, which it looks up in torch's tables (a group torch did
    # not make has none)
    dist.irecv(tensor, group=group, tag=TAG, group_src=peer).wait()


def small_allreduce_inplace(tensor: torch.Tensor, op: ReduceOp, comm) -> None:
    """Reduce the contiguous 1-D real ``tensor`` with ``op`` over ``comm`` (not AVG's division). The
    messages name their peers by rank in ``comm.torch_group`` (``comm.group_rank``)."""
    n, me = comm.nranks(), comm.rank()
    if n == 1:
        return
    combine = COMBINE[op]
    group = comm.torch_group
    scratch = torch.empty_like(tensor)
    p = 1 << (n.bit_length() - 1)
    if me >= p:  # fold into rank me - p, wait for the result
        peer = comm.group_rank(me - p)
        dist.send(tensor, group=group, tag=TAG, group_dst=peer)
        _recv(tensor, peer, group)
        return
    if me + p < n:
        _recv(scratch, comm.group_rank(me + p), group)
        combine(tensor, scratch, out=tensor)
    mask = 1
    while mask < p:
        partner = me ^ mask
        _exchange(tensor, scratch, comm.group_rank(partner), group)
        if me < partner:
            combine(tensor, scratch, out=tensor)
        else:
            combine(scratch, tensor, out=tensor)
        mask <<= 1
    if me + p < n:
        dist.send(tensor, group=group, tag=TAG, group_dst=comm.group_rank(me + p))
