"""Shared helpers of the collectives: default communicator, argument checks, reductions on gloo."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from bagua_core.runtime.communication import stats
from bagua_core.runtime.communication.communicator import BaguaCommunicator
from bagua_core.runtime.communication.host_staging import needs_staging
from bagua_core.runtime.communication.reduce_op import TORCH_OPS, ReduceOp, to_reduce_op
from bagua_core.runtime.communication.small_allreduce import small_allreduce_inplace
from bagua_core.runtime.failure.record import raise_if_aborted

__all__ = ["resolve_comm", "check_numel", "flat", "as_real", "finish_average", "reduce_inplace_on", "record"]


def resolve_comm(comm: BaguaCommunicator | None) -> BaguaCommunicator | None:
    """The given communicator, or the global communicator of the default process group; None when this
    process is not a member of it: a collective called there returns without doing anything (as in the
    original and in ``torch.distributed``), so every rank may run the same code over a sub-group."""
    raise_if_aborted()  # after a failure on this rank (or a peer's, learned), nothing further is issued
    if comm is None:
        from bagua_core.runtime.process_group import get_default_group

        comm = get_default_group().get_global_communicator()
    return comm if comm.is_member else None


def check_numel(name: str, tensor: torch.Tensor, expected: int, why: str) -> None:
    if tensor.numel() != expected:
        raise ValueError(f"{name} must have {expected} elements ({why}), got {tensor.numel()}")


def flat(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """A 1-D view of a contiguous tensor (collectives treat tensors as flat buffers)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous; call .contiguous() first")
    return tensor if tensor.dim() == 1 else tensor.view(-1)


def record(collective: str, tensor: torch.Tensor | int) -> None:
    """Count ``tensor`` (or that many bytes) as handed to ``collective`` (:mod:`.stats`): an algorithm that calls
    ``torch.distributed`` itself records what it sends, so every byte handed to a collective is counted."""
    stats.record(collective, tensor if isinstance(tensor, int) else tensor.numel() * tensor.element_size())


def as_real(tensor: torch.Tensor, op: ReduceOp) -> torch.Tensor:
    if tensor.is_complex():
        if op not in (ReduceOp.SUM, ReduceOp.AVG):
            raise ValueError(f"complex tensors support only SUM and AVG, got {op.name}")
        return torch.view_as_real(tensor)
    return tensor


def finish_average(tensor: torch.Tensor, nranks: int) -> None:
    """Divide a SUM by ``nranks`` in place (integers: floor division, like the seed on CPU)."""
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.div_(nranks)
    else:
        tensor.copy_(torch.div(tensor, nranks, rounding_mode="floor"))


def reduce_inplace_on(tensor: torch.Tensor, op: object, comm: BaguaCommunicator, dst: int | None) -> Callable[[], None]:
    """Start reducing ``tensor`` in place over ``comm``: to every rank (``dst is None``) or to ``dst``;
    return the function that waits for it and finishes it. Small allreduces on gloo run
    :mod:`small_allreduce` to completion here; the others stay in flight until the function is called.

    AVG is a SUM followed by a division on every backend (gloo has no AVG, and a division after the
    sum keeps every rank bit-identical).
    """
    op = to_reduce_op(op)
    view = as_real(tensor, op)
    torch_op = TORCH_OPS[ReduceOp.SUM if op == ReduceOp.AVG else op]
    work = None
    staged = None  # gloo reduces CUDA tensors only in allreduce: reduce goes through the host
    if dst is None and comm.use_small_allreduce(view):
        small_allreduce_inplace(view, op, comm)
    elif dst is None:
        work = dist.all_reduce(view, op=torch_op, group=comm.torch_group, async_op=True)
    else:
        staged = view.detach().to("cpu") if needs_staging(view, comm.torch_group) else None
        work = dist.reduce(view if staged is None else staged, op=torch_op, group=comm.torch_group,
                           async_op=True, group_dst=comm.group_rank(dst))
    average = op == ReduceOp.AVG and (dst is None or comm.rank() == dst)

    def finish() -> None:
        if work is not None:
            work.wait()
        if staged is not None:
            view.copy_(staged)
        if average:
            finish_average(tensor, comm.nranks())

    return finish
