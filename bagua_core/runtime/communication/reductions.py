"""Reducing collectives: allreduce, reduce, reduce_scatter (out-of-place and ``_inplace``).

Both documented call forms are accepted: ``allreduce(send_tensor, recv_tensor, op, comm)`` and the
older in-place ``allreduce(tensor, op=..., comm=...)``; ``reduce(send_tensor, recv_tensor, dst, op)``
and the older ``reduce(tensor, dst, op)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bagua_core.runtime.communication.common import (
    check_numel,
    finish_average,
    flat,
    record,
    reduce_inplace_on,
    resolve_comm,
)
from bagua_core.runtime.communication.communicator import BaguaCommunicator
from bagua_core.runtime.communication.host_staging import on_host
from bagua_core.runtime.communication.reduce_op import TORCH_OPS, ReduceOp, to_reduce_op
from bagua_core.runtime.communication.torch_compat import reduce_scatter_single

__all__ = [
    "allreduce",
    "allreduce_inplace",
    "allreduce_inplace_start",
    "reduce",
    "reduce_inplace",
    "reduce_scatter",
    "reduce_scatter_inplace",
]


def allreduce_inplace(tensor: torch.Tensor, op: object = ReduceOp.SUM, comm: BaguaCommunicator | None = None) -> None:
    """Reduce ``tensor`` over all ranks of ``comm`` and leave the result in it on every rank."""
    allreduce_inplace_start(tensor, op=op, comm=comm)()


def _done() -> None:
    return None


def allreduce_inplace_start(
    tensor: torch.Tensor, op: object = ReduceOp.SUM, comm: BaguaCommunicator | None = None
) -> Callable[[], None]:
    """Start :func:`allreduce_inplace` and return the function that waits for it and finishes it
    (AVG's division); ``tensor`` holds the result once that returned. Allreduces on torch's process
    groups stay in flight meanwhile (gloo runs up to two at once), so several can share a
    high-latency link; small ones and the native NCCL communicator's are done before this returns.

    Example::

        >>> finish = allreduce_inplace_start(bucket_buffer, op=ReduceOp.AVG)
        >>> ...                                   # start the next one, compute
        >>> finish()                              # bucket_buffer is averaged
    """
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return _done
    buffer = flat(tensor, "tensor")
    record("allreduce", buffer)
    nccl = comm.native_nccl_for(buffer)
    if nccl is not None:
        nccl.allreduce_inplace(buffer, to_reduce_op(op))
        return _done
    return reduce_inplace_on(buffer, op, comm, dst=None)


def allreduce(
    send_tensor: torch.Tensor,
    recv_tensor: torch.Tensor | None = None,
    op: object = ReduceOp.SUM,
    comm: BaguaCommunicator | None = None,
) -> None:
    """Reduce ``send_tensor`` over all ranks into ``recv_tensor`` (in place when it is not given).

    Example (2 ranks, int64 and complex)::

        >>> send_tensor = torch.arange(2, dtype=torch.int64) + 1 + 2 * rank   # [1, 2] and [3, 4]
        >>> recv_tensor = torch.zeros(2, dtype=torch.int64)
        >>> allreduce(send_tensor, recv_tensor)
        >>> recv_tensor                                                         # on both ranks
        tensor([4, 6])
        >>> send_tensor = torch.tensor([1+1j, 2+2j], dtype=torch.cfloat) + 2 * rank * (1+1j)
        >>> recv_tensor = torch.zeros(2, dtype=torch.cfloat)
        >>> allreduce(send_tensor, recv_tensor)
        >>> recv_tensor
        tensor([4.+4.j, 6.+6.j])
    """
    if recv_tensor is not None and not isinstance(recv_tensor, torch.Tensor):
        op, recv_tensor = recv_tensor, None  # older form: allreduce(tensor, op)
    if recv_tensor is None:
        return allreduce_inplace(send_tensor, op=op, comm=comm)
    check_numel("recv_tensor", recv_tensor, send_tensor.numel(), "same as send_tensor")
    out = flat(recv_tensor, "recv_tensor")
    out.copy_(flat(send_tensor, "send_tensor"))
    allreduce_inplace(out, op=op, comm=comm)


def reduce_inplace(
    tensor: torch.Tensor, dst: int = 0, op: object = ReduceOp.SUM, comm: BaguaCommunicator | None = None
) -> None:
    """Reduce ``tensor`` of every rank into ``tensor`` on rank ``dst``; other ranks' tensors are kept."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    buffer = flat(tensor, "tensor")
    record("reduce", buffer)
    work = buffer if comm.rank() == dst else buffer.clone()
    nccl = comm.native_nccl_for(buffer)
    if nccl is not None:
        return nccl.reduce_inplace(work, dst, to_reduce_op(op))
    reduce_inplace_on(work, op, comm, dst=dst)()


def reduce(
    send_tensor: torch.Tensor,
    recv_tensor: torch.Tensor | None = None,
    dst: int | None = None,
    op: object = ReduceOp.SUM,
    comm: BaguaCommunicator | None = None,
) -> None:
    """The reduction of every rank's ``send_tensor`` lands in ``recv_tensor`` on rank ``dst`` (other
    ranks' ``recv_tensor`` untouched). The older form ``reduce(tensor, dst, op=SUM, comm=None)`` (no
    receive tensor: an int in its place, or none given) reduces in place.

    Example::

        >>> reduce(torch.ones(2) * (rank + 1), out, dst=0)   # out == [3., 3.] on rank 0 of 2
    """
    if recv_tensor is not None and not isinstance(recv_tensor, torch.Tensor):  # older form, positional
        if isinstance(op, BaguaCommunicator):  # reduce(tensor, dst, op, comm)
            comm, op = op, dst
        elif dst is not None:  # reduce(tensor, dst, op)
            op = dst
        recv_tensor, dst = None, recv_tensor
    dst = 0 if dst is None else int(dst)
    if recv_tensor is None:
        return reduce_inplace(send_tensor, dst=dst, op=op, comm=comm)
    check_numel("recv_tensor", recv_tensor, send_tensor.numel(), "same as send_tensor")
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    work = flat(send_tensor, "send_tensor").clone()
    reduce_inplace(work, dst=dst, op=op, comm=comm)
    if comm.rank() == dst:
        flat(recv_tensor, "recv_tensor").copy_(work)


def reduce_scatter(
    send_tensor: torch.Tensor,
    recv_tensor: torch.Tensor,
    op: object = ReduceOp.SUM,
    comm: BaguaCommunicator | None = None,
) -> None:
    """Reduce ``send_tensor`` (``nranks`` equal chunks) over all ranks; rank i receives chunk i."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    n = comm.nranks()
    send = flat(send_tensor, "send_tensor")
    out = flat(recv_tensor, "recv_tensor")
    check_numel("send_tensor", send, out.numel() * n, f"nranks ({n}) x recv_tensor's elements")
    op = to_reduce_op(op)
    record("reduce_scatter", send)
    nccl = comm.native_nccl_for(send)
    if nccl is not None:
        return nccl.reduce_scatter(send, out, op)
    send_view = torch.view_as_real(send) if send.is_complex() else send
    out_view = torch.view_as_real(out) if out.is_complex() else out
    torch_op = TORCH_OPS[ReduceOp.SUM if op == ReduceOp.AVG else op]
    with on_host(comm.torch_group, [send_view.reshape(-1)], [out_view.view(-1)]) as ([inp], [outp]):
        reduce_scatter_single(outp, inp, op=torch_op, group=comm.torch_group)
    if op == ReduceOp.AVG:
        finish_average(out, n)


def reduce_scatter_inplace(tensor: torch.Tensor, op: object = ReduceOp.SUM, comm: BaguaCommunicator | None = None) -> None:
    """Like :func:`reduce_scatter`; the result for rank i is written into chunk i of ``tensor``."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    buffer = flat(tensor, "tensor")
    n = comm.nranks()
    if buffer.numel() % n:
        raise ValueError(f"tensor's {buffer.numel()} elements do not split into {n} equal chunks")
    chunk = buffer.numel() // n
    out = torch.empty(chunk, dtype=buffer.dtype, device=buffer.device)
    reduce_scatter(buffer, out, op=op, comm=comm)
    buffer[comm.rank() * chunk : (comm.rank() + 1) * chunk].copy_(out)
