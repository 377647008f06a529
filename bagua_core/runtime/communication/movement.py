"""Collectives that move data without reducing it: broadcast, allgather, gather, scatter."""

from __future__ import annotations

import torch
import torch.distributed as dist

from bagua_core.runtime.communication.common import check_numel, flat, record, resolve_comm
from bagua_core.runtime.communication.communicator import BaguaCommunicator
from bagua_core.runtime.communication.host_staging import on_host
from bagua_core.runtime.communication.torch_compat import all_gather_single


__all__ = [
    "broadcast",
    "allgather",
    "allgather_inplace",
    "gather",
    "gather_inplace",
    "scatter",
    "scatter_inplace",
]


def _real(tensor: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(tensor).view(-1) if tensor.is_complex() else tensor


def broadcast(
    tensor: torch.Tensor, src: int = 0, comm: BaguaCommunicator | None = None, *, root: int | None = None
) -> None:
    """Copy ``tensor`` of rank ``src`` into ``tensor`` on every rank (``root=`` is the older name).

    Example::

        >>> t = torch.full((2,), float(rank))
        >>> broadcast(t, src=0)          # t == [0., 0.] everywhere
    """
    if root is not None:
        src = root
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    buffer = flat(tensor, "tensor")
    record("broadcast", buffer)
    nccl = comm.native_nccl_for(buffer)
    if nccl is not None:
        return nccl.broadcast(buffer, src)
    dist.broadcast(_real(buffer), group=comm.torch_group, group_src=comm.group_rank(src))


def allgather(send_tensor: torch.Tensor, recv_tensor: torch.Tensor, comm: BaguaCommunicator | None = None) -> None:
    """Concatenate every rank's ``send_tensor`` into ``recv_tensor`` (rank i's data in chunk i)."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    send = flat(send_tensor, "send_tensor")
    out = flat(recv_tensor, "recv_tensor")
    check_numel("recv_tensor", out, send.numel() * comm.nranks(), f"nranks ({comm.nranks()}) x send_tensor's")
    record("allgather", send)
    nccl = comm.native_nccl_for(send)
    if nccl is not None:
        return nccl.allgather(send, out)
    with on_host(comm.torch_group, [_real(send)], [_real(out)]) as ([send_view], [out_view]):
        all_gather_single(out_view, send_view, group=comm.torch_group)


def allgather_inplace(tensor: torch.Tensor, comm: BaguaCommunicator | None = None) -> None:
    """Like :func:`allgather`; chunk ``rank`` of ``tensor`` is this rank's input."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    buffer = flat(tensor, "tensor")
    n = comm.nranks()
    if buffer.numel() % n:
        raise ValueError(f"tensor's {buffer.numel()} elements do not split into {n} equal chunks")
    chunk = buffer.numel() // n
    mine = buffer[comm.rank() * chunk : (comm.rank() + 1) * chunk].clone()
    allgather(mine, buffer, comm=comm)


def gather(
    send_tensor: torch.Tensor, recv_tensor: torch.Tensor | None, dst: int, comm: BaguaCommunicator | None = None
) -> None:
    """Collect every rank's ``send_tensor`` into ``recv_tensor`` on rank ``dst`` (chunk i from rank i)."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    send = flat(send_tensor, "send_tensor")
    record("gather", send)
    gather_list = None
    if comm.rank() == dst:
        if recv_tensor is None:
            raise ValueError("recv_tensor is required on the dst rank of gather")
        out = flat(recv_tensor, "recv_tensor")
        check_numel("recv_tensor", out, send.numel() * comm.nranks(), f"nranks ({comm.nranks()}) x send_tensor's")
        gather_list = [_real(chunk) for chunk in out.chunk(comm.nranks())]
    with on_host(comm.torch_group, [_real(send)], gather_list or []) as ([send_view], outputs):
        dist.gather(send_view, outputs or None, group=comm.torch_group, group_dst=comm.group_rank(dst))


def gather_inplace(tensor: torch.Tensor, count: int, dst: int, comm: BaguaCommunicator | None = None) -> None:
    """In-place gather: on ``dst`` the tensor holds ``count * nranks`` elements and chunk ``dst`` is its
    input; on other ranks it holds the ``count`` elements they send."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    buffer = flat(tensor, "tensor")
    if comm.rank() == dst:
        check_numel("tensor", buffer, count * comm.nranks(), "count x nranks on the dst rank")
        mine = buffer[dst * count : (dst + 1) * count].clone()
        gather(mine, buffer, dst, comm=comm)
    else:
        check_numel("tensor", buffer, count, "count on ranks other than dst")
        gather(buffer, None, dst, comm=comm)


def scatter(
    send_tensor: torch.Tensor | None, recv_tensor: torch.Tensor, src: int, comm: BaguaCommunicator | None = None
) -> None:
    """Split ``send_tensor`` of rank ``src`` into ``nranks`` chunks; rank i receives chunk i."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    out = flat(recv_tensor, "recv_tensor")
    scatter_list = None
    if comm.rank() == src:
        if send_tensor is None:
            raise ValueError("send_tensor is required on the src rank of scatter")
        send = flat(send_tensor, "send_tensor")
        check_numel("send_tensor", send, out.numel() * comm.nranks(), f"nranks ({comm.nranks()}) x recv_tensor's")
        record("scatter", send)
        scatter_list = [_real(chunk) for chunk in send.chunk(comm.nranks())]
    with on_host(comm.torch_group, scatter_list or [], [_real(out)]) as (inputs, [out_view]):
        dist.scatter(out_view, inputs or None, group=comm.torch_group, group_src=comm.group_rank(src))


def scatter_inplace(tensor: torch.Tensor, count: int, src: int, comm: BaguaCommunicator | None = None) -> None:
    """In-place scatter: on ``src`` the tensor holds ``count * nranks`` elements (chunk ``src`` stays
    its own); on the others it receives its ``count`` elements."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    buffer = flat(tensor, "tensor")
    if comm.rank() == src:
        check_numel("tensor", buffer, count * comm.nranks(), "count x nranks on the src rank")
        mine = torch.empty(count, dtype=buffer.dtype, device=buffer.device)
        scatter(buffer, mine, src, comm=comm)
    else:
        check_numel("tensor", buffer, count, "count on ranks other than src")
        scatter(None, buffer, src, comm=comm)
