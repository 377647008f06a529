"""A differentiable allreduce over a torch process group: the backward pass allreduces the gradient
with the same operation (the original's ``data_parallel.functional.all_reduce``).

Example::

    >>> y = all_reduce(x)            # x summed over every rank; y.sum().backward() sums x.grad too
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from bagua_core.runtime.communication.reduce_op import ReduceOp, to_reduce_op
from bagua_core.runtime.communication.reductions import allreduce_inplace

__all__ = ["ReduceOp", "all_reduce", "torch_reduce_op_to_bagua"]


def torch_reduce_op_to_bagua(op: object) -> ReduceOp:
    """bagua's ``ReduceOp`` for a ``torch.distributed.ReduceOp`` (or a bagua one)."""
    return to_reduce_op(op)


def _communicator(group: dist.ProcessGroup | None):
    from bagua_core.runtime.process_group import bagua_group_of, get_default_group

    if group is None or group is dist.group.WORLD:
        return get_default_group().get_global_communicator()
    return bagua_group_of(group).get_global_communicator()


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, group, tensor):  # noqa: D102
        ctx.op, ctx.group = op, group
        result = tensor.clone().contiguous()
        allreduce_inplace(result, op=op, comm=_communicator(group))
        return result

    @staticmethod
    def backward(ctx, grad_output):  # noqa: D102
        return None, None, _AllReduce.apply(ctx.op, ctx.group, grad_output)


def all_reduce(tensor: torch.Tensor, op: object = dist.ReduceOp.SUM, group: object = dist.group.WORLD) -> torch.Tensor:
    """A new tensor: ``tensor`` reduced with ``op`` over ``group`` (every rank gets the same result);
    differentiable, its gradient is the allreduce of the output's gradient."""
    return _AllReduce.apply(op, group, tensor)
