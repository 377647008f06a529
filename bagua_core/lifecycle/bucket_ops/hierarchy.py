"""The two pieces every bucket operation shares: which process group it runs on, and the hierarchical
pattern (reduce inside the node, exchange among the node leaders, broadcast inside the node).

The pattern is two calls around the operation's own exchange, which the operation runs itself between
them (nothing here calls back into it): ``hierarchy.reduce_to_leader`` reduces ``tensor`` (``reduce_op``)
to the node's leader over the intra-node communicator (skipped with one rank per node) and returns the
inter-node communicator on the leaders, None elsewhere; ``hierarchy.broadcast_from_leader`` broadcasts the
leader's result inside the node (skipped with one rank per node). Every rank of the group calls both,
in the same order as the other ranks of its node (so the intra-node collectives of several buckets pair
up: reduces as the buckets start, broadcasts as they finish).

Example::

    >>> group = hierarchy.resolve_group(self.group, bucket)
    >>> inter = hierarchy.reduce_to_leader(tensor, group, ReduceOp.AVG)
    >>> if inter is not None:                       # a node leader: the exchange among the leaders
    ...     allreduce_inplace(tensor, op=ReduceOp.AVG, comm=inter)
    >>> hierarchy.broadcast_from_leader(tensor, group)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bagua_core.runtime.communication import ReduceOp, broadcast, reduce_inplace
from bagua_core.lifecycle.bucket_ops.operand import BucketOperand
from bagua_core.runtime.communication.communicator import BaguaCommunicator

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.runtime.process_group import BaguaProcessGroup

__all__ = ["Hierarchy", "hierarchy"]


class Hierarchy:
    """The group a bucket operation runs on and the hierarchical pattern around its exchange (module doc);
    ``hierarchy`` is the one instance: ``hierarchy.resolve_group``, ``hierarchy.reduce_to_leader``,
    ``hierarchy.broadcast_from_leader``."""

    @staticmethod
    def resolve_group(op_group: BaguaProcessGroup | None, bucket: BucketOperand) -> BaguaProcessGroup:
        """The group an operation runs on: its own (``group=`` when it was built), else the bucket's (the
        wrapped module's), else the default group.

        Example::

            >>> hierarchy.resolve_group(None, bucket) is bucket.process_group
            True
        """
        group = op_group or bucket.process_group
        if group is None:
            from bagua_core.runtime.process_group import get_default_group

            group = get_default_group()
        return group

    @staticmethod
    def reduce_to_leader(tensor: torch.Tensor, group: BaguaProcessGroup,
                         reduce_op: ReduceOp = ReduceOp.AVG) -> BaguaCommunicator | None:
        """Reduce ``tensor`` (``reduce_op``) to the leader of this rank's node, in place on the leader;
        return the inter-node communicator when this rank is a node leader (the caller runs the exchange
        among the leaders on it), else None. Follow it with :meth:`~Hierarchy.broadcast_from_leader`."""
        intra, inter = group.get_intra_node_communicator(), group.get_inter_node_communicator()
        if intra.nranks() > 1:
            reduce_inplace(tensor, dst=0, op=reduce_op, comm=intra)
        return inter if inter.is_member else None

    @staticmethod
    def broadcast_from_leader(tensor: torch.Tensor, group: BaguaProcessGroup) -> None:
        """Broadcast the node leader's ``tensor`` to the other ranks of the node (nothing with one rank per
        node)."""
        intra = group.get_intra_node_communicator()
        if intra.nranks() > 1:
            broadcast(tensor, src=0, comm=intra)


hierarchy = Hierarchy()
