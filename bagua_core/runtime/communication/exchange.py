"""Personalised exchanges and point-to-point: alltoall, alltoall_v, send, recv, barrier.

alltoall uses the backend's ``all_to_all_single`` where it has one and is composed from paired
non-blocking sends and receives where it does not, so it works on every backend.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from bagua_core.runtime.communication.common import check_numel, flat, record, resolve_comm
from bagua_core.runtime.communication.communicator import BaguaCommunicator
from bagua_core.runtime.communication.host_staging import irecv as staged_irecv
from bagua_core.runtime.communication.host_staging import isend as staged_isend
from bagua_core.runtime.communication.host_staging import on_host

__all__ = ["alltoall", "alltoall_inplace", "alltoall_v", "alltoall_v_inplace", "send", "recv", "barrier"]


def _real(tensor: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(tensor).view(-1) if tensor.is_complex() else tensor


def _exchange(
    send: torch.Tensor, recv: torch.Tensor, send_counts: list[int], recv_counts: list[int], comm: BaguaCommunicator
) -> None:
    """Send ``send_counts[j]`` consecutive elements to rank j; receive ``recv_counts[j]`` from rank j."""
    scale = 2 if send.is_complex() else 1
    send_r, recv_r = _real(send), _real(recv)
    sc, rc = [c * scale for c in send_counts], [c * scale for c in recv_counts]
    try:
        with on_host(comm.torch_group, [send_r], [recv_r]) as ([send_view], [recv_view]):
            dist.all_to_all_single(recv_view, send_view, rc, sc, group=comm.torch_group)
        return
    except (RuntimeError, NotImplementedError) as exc:  # backend without all_to_all: compose
        if "not supported" not in str(exc).lower() and "unsupported" not in str(exc).lower():
            raise
    me = comm.rank()
    send_chunks = torch.split(send_r, sc)
    recv_chunks = torch.split(recv_r, rc)
    recv_chunks[me].copy_(send_chunks[me])
    works = []
    for peer in range(comm.nranks()):
        if peer == me:
            continue
        other = comm.group_rank(peer)
        works.append(staged_isend(send_chunks[peer].contiguous(), group=comm.torch_group, group_dst=other))
        works.append(staged_irecv(recv_chunks[peer], group=comm.torch_group, group_src=other))
    for work in works:
        work.wait()


def alltoall(send_tensor: torch.Tensor, recv_tensor: torch.Tensor, comm: BaguaCommunicator | None = None) -> None:
    """Chunk j of ``send_tensor`` (``nranks`` equal chunks) goes to rank j; chunk i of
    ``recv_tensor`` comes from rank i.

    Example (2 ranks)::

        >>> send = torch.tensor([10 * rank, 10 * rank + 1])
        >>> alltoall(send, recv)         # rank 0: [0, 10], rank 1: [1, 11]
    """
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    send, out = flat(send_tensor, "send_tensor"), flat(recv_tensor, "recv_tensor")
    n = comm.nranks()
    check_numel("recv_tensor", out, send.numel(), "same as send_tensor")
    if send.numel() % n:
        raise ValueError(f"send_tensor's {send.numel()} elements do not split into {n} equal chunks")
    record("alltoall", send)
    nccl = comm.native_nccl_for(send)
    if nccl is not None:
        return nccl.alltoall(send, out)
    counts = [send.numel() // n] * n
    _exchange(send, out, counts, counts, comm)


def alltoall_inplace(tensor: torch.Tensor, comm: BaguaCommunicator | None = None) -> None:
    """Like :func:`alltoall`, with ``tensor`` as both the input and the output."""
    buffer = flat(tensor, "tensor")
    alltoall(buffer.clone(), buffer, comm=comm)


def _layout(name: str, counts: Sequence[int], displs: Sequence[int], n: int, numel: int) -> tuple[list[int], list[int]]:
    """The first ``n`` counts and displacements, checked. Longer lists are accepted, as the original read
    only the first ``nranks`` entries (its own example passes ``nranks + 1`` displacements)."""
    if len(counts) < n or len(displs) < n:
        raise ValueError(f"{name}_counts and {name}_displs need at least one entry per rank ({n}), "
                         f"got {len(counts)} and {len(displs)}")
    counts, displs = [int(c) for c in counts[:n]], [int(d) for d in displs[:n]]
    for count, displ in zip(counts, displs):
        if count < 0 or displ < 0 or displ + count > numel:
            raise ValueError(f"{name} segment (displ={displ}, count={count}) is outside the tensor of {numel} elements")
    return counts, displs


def alltoall_v(
    send_tensor: torch.Tensor,
    send_counts: Sequence[int],
    send_displs: Sequence[int],
    recv_tensor: torch.Tensor,
    recv_counts: Sequence[int],
    recv_displs: Sequence[int],
    comm: BaguaCommunicator | None = None,
) -> None:
    """Send ``send_counts[j]`` elements starting at ``send_displs[j]`` to rank j, receive
    ``recv_counts[i]`` elements from rank i at ``recv_displs[i]``. Counts must match pairwise; entries
    beyond the first ``nranks`` are ignored, as in the original."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    send, out = flat(send_tensor, "send_tensor"), flat(recv_tensor, "recv_tensor")
    n = comm.nranks()
    send_counts, send_displs = _layout("send", send_counts, send_displs, n, send.numel())
    recv_counts, recv_displs = _layout("recv", recv_counts, recv_displs, n, out.numel())
    packed = torch.cat([send[d : d + c] for c, d in zip(send_counts, send_displs)])
    received = torch.empty(sum(recv_counts), dtype=out.dtype, device=out.device)
    record("alltoall_v", packed)
    _exchange(packed, received, send_counts, recv_counts, comm)
    for piece, count, displ in zip(torch.split(received, recv_counts), recv_counts, recv_displs):
        out[displ : displ + count].copy_(piece)


def alltoall_v_inplace(
    tensor: torch.Tensor, counts: Sequence[int], displs: Sequence[int], comm: BaguaCommunicator | None = None
) -> None:
    """:func:`alltoall_v` with the same tensor, counts and displacements for sending and receiving."""
    buffer = flat(tensor, "tensor")
    alltoall_v(buffer.clone(), counts, displs, buffer, counts, displs, comm=comm)


def send(tensor: torch.Tensor, dst: int, comm: BaguaCommunicator | None = None) -> None:
    """Send ``tensor`` to rank ``dst`` of ``comm`` (blocking)."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    buffer = flat(tensor, "tensor")
    record("send", buffer)
    nccl = comm.native_nccl_for(buffer)
    if nccl is not None:
        return nccl.send(buffer, dst)
    staged_isend(_real(buffer), group=comm.torch_group, group_dst=comm.group_rank(dst)).wait()


def recv(tensor: torch.Tensor, src: int, comm: BaguaCommunicator | None = None) -> None:
    """Receive into ``tensor`` from rank ``src`` of ``comm`` (blocking)."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    buffer = flat(tensor, "tensor")
    nccl = comm.native_nccl_for(buffer)
    if nccl is not None:
        return nccl.recv(buffer, src)
    staged_irecv(_real(buffer), group=comm.torch_group, group_src=comm.group_rank(src)).wait()


def barrier(comm: BaguaCommunicator | None = None) -> None:
    """Return once every rank of ``comm`` has called it."""
    comm = resolve_comm(comm)
    if comm is None:  # not a member: nothing to do
        return
    dist.barrier(group=comm.torch_group)

