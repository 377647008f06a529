"""The centralized synchronous operation: every rank ends with the same reduced bucket."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from bagua_core.runtime import env

from bagua_core.runtime.communication import (
    ReduceOp,
    allgather,
    allreduce_inplace,
    allreduce_inplace_start,
    reduce_scatter,
)
from bagua_core.lifecycle.bucket_ops.hierarchy import hierarchy
from bagua_core.runtime.communication.common import finish_average
from bagua_core.lifecycle.bucket_ops.operand import BucketOperand
from bagua_core.runtime.communication.communicator import BaguaCommunicator

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.runtime.process_group import BaguaProcessGroup

__all__ = ["CentralizedSynchronousOp", "hierarchical_allreduce", "start_allreduce_in_pieces"]


def start_allreduce_in_pieces(tensor: torch.Tensor, op: ReduceOp, comm: BaguaCommunicator) -> Callable[[], None]:
    """Start allreducing ``tensor`` as pieces of at most ``env.get_default_bucket_size()`` bytes, all
    in flight at once, and return what finishes them all. gloo runs two at a time, so the round trips
    of one overlap another's transfer (a bucket larger than the bucket size holds one large tensor);
    on two ranks the result is the same bits as one allreduce."""
    flat = tensor.view(-1)
    piece = max(1, env.get_default_bucket_size() // max(1, flat.element_size()))
    finishes = [allreduce_inplace_start(flat[b : b + piece], op=op, comm=comm) for b in range(0, flat.numel(), piece)]

    def finish_all() -> None:
        for finish in finishes:
            finish()

    return finish_all


def hierarchical_allreduce(tensor: torch.Tensor, group: BaguaProcessGroup, average: bool) -> None:
    """Reduce (SUM) to the node leader, allreduce (SUM) among leaders, divide by the world size when
    averaging, broadcast inside the node (:mod:`~bagua_core.lifecycle.bucket_ops.hierarchy`)."""
    inter = hierarchy.reduce_to_leader(tensor, group, ReduceOp.SUM)
    if inter is not None:
        if inter.nranks() > 1:
            allreduce_inplace(tensor, op=ReduceOp.SUM, comm=inter)
        if average:
            finish_average(tensor, group.world_size)
    hierarchy.broadcast_from_leader(tensor, group)


def scattergather_allreduce(tensor: torch.Tensor, group: BaguaProcessGroup, average: bool) -> None:
    """Reduce-scatter then allgather (padded to a multiple of the number of ranks)."""
    comm = group.get_global_communicator()
    n = comm.nranks()
    padded = -(-tensor.numel() // n) * n
    work = tensor if padded == tensor.numel() else torch.cat([tensor, tensor.new_zeros(padded - tensor.numel())])
    chunk = torch.empty(padded // n, dtype=tensor.dtype, device=tensor.device)
    reduce_scatter(work, chunk, op=ReduceOp.AVG if average else ReduceOp.SUM, comm=comm)
    allgather(chunk, work, comm=comm)
    if work is not tensor:
        tensor.copy_(work[: tensor.numel()])


class CentralizedSynchronousOp:
    """Allreduce of the bucket (AVG when ``average``), plain, scatter-gather or hierarchical, in full
    precision, in the bucket's dtype. The op of gradient_allreduce, and of the full-precision phases of
    other algorithms (a compressed allreduce is an algorithm's own op).

    Example::

        >>> bucket.append_op(CentralizedSynchronousOp(group, hierarchical=False, average=True))
    """

    def __init__(
        self,
        group: BaguaProcessGroup | None = None,
        hierarchical: bool = False,
        average: bool = True,
        scattergather: bool = False,
    ) -> None:
        self.group = group
        self.hierarchical = bool(hierarchical)
        self.average = bool(average)
        self.scattergather = bool(scattergather)

    def __call__(self, bucket: BucketOperand) -> None:
        group = hierarchy.resolve_group(self.group, bucket)
        tensor = bucket.flattened_view()  # one layout check per run
        flattened = tensor is bucket.buffer
        if self.hierarchical:
            hierarchical_allreduce(tensor, group, self.average)
        elif self.scattergather:
            scattergather_allreduce(tensor, group, self.average)
        elif bucket.may_defer(self):  # in flight while later buckets start: they share the link
            finish = start_allreduce_in_pieces(tensor, ReduceOp.AVG if self.average else ReduceOp.SUM,
                                               group.get_global_communicator())
            bucket.defer(finish if flattened else lambda: (finish(), bucket.write_back(tensor)))
            return
        else:
            allreduce_inplace(tensor, op=ReduceOp.AVG if self.average else ReduceOp.SUM, comm=group.get_global_communicator())
        if not flattened:
            bucket.write_back(tensor)
