"""``QuorumGroup``: the ``BaguaProcessGroup`` an algorithm is reified on in fault-tolerant mode.

One is built per quorum (a change of membership builds a new one). Each replica is one node of it:
the intra-node communicator is the replica's own, fixed group (its torchrun's ranks), the inter-node
communicator the quorum's managed group among the replicas' first ranks, and the global communicator the
quorum's managed group over every rank of every replica
(:class:`~bagua_features.fault_tolerance.managed_group.ManagedGroup`), so whatever an algorithm derives from
its group (world size, chunking, peers, rings, denominators) is derived from the step's quorum, and the
hierarchical algorithms split exactly as on a multi-node job. Its ``membership`` names the quorum and the
managed group, which is all an algorithm learns of fault-tolerant mode.

Example::

    >>> group = QuorumGroup(everyone, leaders, replica_rank=1, replicas=3, ranks_per_replica=2, quorum_id=7)
    >>> group.world_size, group.num_nodes, group.get_global_communicator().rank()     # on local rank 1
    (6, 3, 3)
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from bagua_core.runtime.communication.communicator import BaguaCommunicator
from bagua_core.runtime.communication.worker import CommunicationWorker
from bagua_features.fault_tolerance.managed_group import VIRTUAL_RANK_BASE, ManagedGroup
from bagua_core.runtime.membership import Membership
from bagua_core.runtime.process_group import BaguaProcessGroup, _all_groups

__all__ = ["QuorumGroup"]


class QuorumGroup(BaguaProcessGroup):
    """The ranks of one quorum's replicas as a ``BaguaProcessGroup``: one node per replica (module doc).

    ``everyone``: the managed group over every rank of every replica (the global communicator);
    ``leaders``: on a replica's first rank, the managed group among the replicas' first ranks (the
    inter-node communicator; None elsewhere). ``replica_rank``: this replica's rank in the quorum.
    ``intra``: the torch group, global ranks and ranks in that group (``BaguaCommunicator``'s three) inside a
    "node" when it is not the replica's ranks (a model sharded over them: each rank is its own node of the
    group between the same shard of every replica)."""

    def __init__(self, everyone: ManagedGroup, leaders: ManagedGroup | None, replica_rank: int, replicas: int,
                 ranks_per_replica: int, quorum_id: int,
                 intra: tuple[Any, list[int], list[int]] | None = None) -> None:
        # BaguaProcessGroup.__init__ derives nodes from the job's ranks; here they come from the quorum
        self.replica_rank = replica_rank
        self.quorum_id = quorum_id
        self.managed = everyone
        self.membership = Membership(changes=True, quorum_id=quorum_id, between_replicas=everyone, commit="quorum")
        self.ranks = list(everyone.ranks)  # quorum order (bagua's virtual ranks, see managed_group; torch sees none)
        self.name = self.group_name = f"quorum{quorum_id}"
        self.stream = None
        self.torch_group = everyone
        size = ranks_per_replica
        self.node_ranks = [self.ranks[i * size:(i + 1) * size] for i in range(replicas)]
        self.leaders = [members[0] for members in self.node_ranks]
        self._global = BaguaCommunicator(everyone, self.ranks, f"{self.name}/global")
        if size == 1:
            self._inter = BaguaCommunicator(everyone, self.ranks, f"{self.name}/inter")
        elif leaders is not None:
            self._inter = BaguaCommunicator(leaders, leaders.ranks, f"{self.name}/inter")
        else:  # not a replica's first rank: outside the inter-node communicator (rank -1)
            self._inter = BaguaCommunicator(None, [VIRTUAL_RANK_BASE + j for j in range(replicas)], f"{self.name}/inter")
        if intra is None:  # the replica's ranks, on its own default group
            intra = (dist.group.WORLD, list(range(dist.get_world_size())), list(range(dist.get_world_size())))
        intra_group, intra_ranks, in_group = intra
        self._intra = BaguaCommunicator(intra_group, intra_ranks, f"{self.name}/intra", in_group)
        self.managed_groups = [g for g in (everyone, leaders) if g is not None and g is not everyone] + [everyone]
        self.worker = CommunicationWorker(self.name)
        _all_groups.add(self)

    @property
    def node_rank(self) -> int:
        return self.replica_rank

    def __repr__(self) -> str:
        return (f"QuorumGroup(quorum {self.quorum_id}, replica {self.replica_rank} of {len(self.node_ranks)}, "
                f"{len(self.node_ranks[0])} rank(s) each)")
