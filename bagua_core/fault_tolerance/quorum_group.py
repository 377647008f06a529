"""``QuorumGroup``: the ``BaguaProcessGroup`` an algorithm is reified on in fault-tolerant mode.

One is built per quorum (a change of membership builds a new one). Each replica is one node of it:
the intra-node communicator is the replica's own, fixed group (one rank), and the global and inter-node
communicators are the quorum's :class:`~bagua_core.fault_tolerance.managed_group.ManagedGroup`, so
whatever an algorithm derives from its group (world size, chunking, peers, rings, denominators) is
derived from the step's quorum, and the hierarchical algorithms split exactly as on a multi-node job.

Example::

    >>> group = QuorumGroup(managed, replica_rank=1, replica_world_size=3, quorum_id=7)
    >>> group.world_size, group.get_global_communicator().rank()
    (3, 1)
"""

from __future__ import annotations

import torch.distributed as dist

from bagua_core.communication.communicator import BaguaCommunicator
from bagua_core.communication.worker import CommunicationWorker
from bagua_core.fault_tolerance.managed_group import ManagedGroup
from bagua_core.process_group import BaguaProcessGroup, _all_groups

__all__ = ["QuorumGroup"]


class QuorumGroup(BaguaProcessGroup):
    """The replicas of one quorum as a ``BaguaProcessGroup`` (one node per replica)."""

    def __init__(self, managed: ManagedGroup, replica_rank: int, replica_world_size: int, quorum_id: int) -> None:
        # BaguaProcessGroup.__init__ derives nodes from the job's ranks; here they come from the quorum
        self.replica_rank = replica_rank
        self.quorum_id = quorum_id
        self.managed = managed
        self.ranks = list(managed.ranks)  # replica-rank order (virtual ranks, see managed_group)
        self.name = self.group_name = f"quorum{quorum_id}"
        self.stream = None
        self.torch_group = managed
        self.node_ranks = [[rank] for rank in self.ranks]
        self.leaders = list(self.ranks)
        self._global = BaguaCommunicator(managed, self.ranks, f"{self.name}/global")
        self._inter = BaguaCommunicator(managed, self.ranks, f"{self.name}/inter")
        self._intra = BaguaCommunicator(dist.group.WORLD, [dist.get_rank()], f"{self.name}/intra")
        self.worker = CommunicationWorker(self.name)
        _all_groups.add(self)

    @property
    def node_rank(self) -> int:
        return self.replica_rank

    def __repr__(self) -> str:
        return f"QuorumGroup(quorum {self.quorum_id}, replica {self.replica_rank} of {self.world_size})"
