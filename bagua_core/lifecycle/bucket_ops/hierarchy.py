"""The two pieces every bucket operation shares: which process group it runs on, and the hierarchical
pattern (reduce inside the node, exchange among the node leaders, broadcast inside the node).

Communicated by :func:`hierarchical`, with ``L`` ranks per node: a reduce of ``tensor`` (``reduce_op``)
to the node's leader over the intra-node communicator (skipped with one rank per node), the caller's
``exchange`` among the node leaders over the inter-node communicator (run only on the leaders; it may
do nothing with one node), then a broadcast of the leader's result inside the node (skipped with one
rank per node). Every rank of the group must call it, with the same ``reduce_op``.

Example::

    >>> group = resolve_group(self.group, bucket)
    >>> hierarchical(tensor, group, lambda inter: allreduce_inplace(tensor, op=ReduceOp.AVG, comm=inter))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from bagua_core.runtime.communication import ReduceOp, broadcast, reduce_inplace
from bagua_core.lifecycle.bucket_ops.operand import BucketOperand
from bagua_core.runtime.communication.communicator import BaguaCommunicator

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.runtime.process_group import BaguaProcessGroup

__all__ = ["hierarchical", "resolve_group", "start_hierarchical"]


def resolve_group(op_group: BaguaProcessGroup | None, bucket: BucketOperand) -> BaguaProcessGroup:
    """The group an operation runs on: its own (``group=`` when it was appended), else the bucket's
    (the wrapped module's), else the default group.

    Example::

        >>> resolve_group(None, bucket) is bucket.process_group
        True
    """
    group = op_group or bucket.process_group
    if group is None:
        from bagua_core.runtime.process_group import get_default_group

        group = get_default_group()
    return group


def hierarchical(tensor: torch.Tensor, group: BaguaProcessGroup, exchange: Callable[[BaguaCommunicator], None],
                 reduce_op: ReduceOp = ReduceOp.AVG) -> None:
    """Reduce ``tensor`` (``reduce_op``) to the node leader, call ``exchange(inter_node_communicator)``
    on the leaders (it updates ``tensor`` in place), broadcast the leader's ``tensor`` inside the node.

    Example::

        >>> hierarchical(x, group, lambda inter: compressed_allreduce_on(x, inter, average=True))
    """
    def start(inter: BaguaCommunicator) -> Callable[[], None]:
        exchange(inter)
        return _nothing

    start_hierarchical(tensor, group, start, reduce_op)()


def start_hierarchical(tensor: torch.Tensor, group: BaguaProcessGroup,
                       start: Callable[[BaguaCommunicator], Callable[[], None]],
                       reduce_op: ReduceOp = ReduceOp.AVG) -> Callable[[], None]:
    """:func:`hierarchical` in two halves, for an exchange that stays in flight: reduces to the node
    leader, calls ``start(inter_node_communicator)`` on the leaders (it returns what finishes the
    exchange) and returns what finishes it and broadcasts the result inside the node. Every rank of
    the group calls the halves in the same order as the other ranks (so the intra-node collectives
    of several buckets pair up: reduces as the buckets start, broadcasts as they finish)."""
    intra, inter = group.get_intra_node_communicator(), group.get_inter_node_communicator()
    if intra.nranks() > 1:
        reduce_inplace(tensor, dst=0, op=reduce_op, comm=intra)
    finish = start(inter) if inter.is_member else _nothing

    def finish_and_broadcast() -> None:
        finish()
        if intra.nranks() > 1:
            broadcast(tensor, src=0, comm=intra)

    return finish_and_broadcast


def _nothing() -> None:
    return None
