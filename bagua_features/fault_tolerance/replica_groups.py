"""The reconfigurable groups between replicas, configured by torchft's ``Manager`` on every new quorum.

torchft gives each rank of a replica a gloo group with the same rank of every other replica (HSDP's
"replicate" dimension). bagua's algorithms also need one group over every rank of every replica (their
global communicator) when a replica has more than one rank: :class:`ReplicaGroups` is torchft's
``ProcessGroupGloo`` (what the Manager configures, heals through and checks) that configures a second
one, over all ``replicas * ranks_per_replica`` ranks, in the same call, under its own prefix. torchft
hands each local rank the store of a *different* primary replica (local rank ``k`` gets the store of
participant ``k % n`` among those at the quorum's step, to spread the load), so the group over every rank
rendezvouses on the store local rank 0 was given, which is the same in every replica: local rank 0
publishes its address in the replica's own store for the quorum, the other local ranks read it there.
With one rank per replica the two are the same group and only one is made.

Example::

    >>> groups = ReplicaGroups(timeout=timedelta(seconds=30))
    >>> manager = Manager(pg=groups, ...)            # the Manager calls groups.configure(...) per quorum
    >>> groups.everyone_inner()                       # the gloo group over every rank of the quorum
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from torchft import ProcessGroupGloo

from bagua_core.runtime.job_store import job_store

__all__ = ["ReplicaGroups"]


class ReplicaGroups(ProcessGroupGloo):
    """torchft's group between the same rank of every replica, plus one over every rank (module doc)."""

    def __init__(self, timeout: timedelta) -> None:
        super().__init__(timeout=timeout)
        self._store_timeout = timeout
        self._everyone = ProcessGroupGloo(timeout=timeout)
        self.ranks_per_replica = 1
        self.quorum_id: int | None = None
        """The quorum the Manager configured these groups for last (it configures them on every new one)."""

    def configure(self, store_addr: str, replica_id: str, rank: int, world_size: int, quorum_id: int | None = None,
                  group_rank: int | None = None, group_world_size: int | None = None,
                  global_ranks: list[int] | None = None) -> None:
        self.quorum_id = quorum_id
        super().configure(store_addr, replica_id, rank, world_size, quorum_id, group_rank, group_world_size,
                          global_ranks)
        per_replica = group_world_size or 1
        self.ranks_per_replica = per_replica
        if per_replica > 1:  # torchft's address ends with this rank's own prefix: .../torchft/<quorum>/<group_rank>
            base = self._everyone_base(store_addr.rsplit("/", 1)[0], quorum_id, group_rank or 0)
            self._everyone.configure(f"{base}/bagua_everyone", replica_id, rank * per_replica + (group_rank or 0),
                                     world_size * per_replica, quorum_id)

    def _everyone_base(self, own: str, quorum_id: int | None, group_rank: int) -> str:
        """The quorum store prefix torchft gave local rank 0 (the same in every replica), published by it in
        the replica's own store and read there by the replica's other ranks."""
        store = job_store()
        key = f"bagua_ft/everyone_store/{quorum_id}"
        if group_rank == 0:
            store.set(key, own)
            return own
        store.wait([key], self._store_timeout)
        return store.get(key).decode()

    def same_rank_inner(self) -> Any:
        """The current gloo group between this rank and the same rank of every replica (None: not configured)."""
        return _configured(self)

    def everyone_inner(self) -> Any:
        """The current gloo group over every rank of every replica of the quorum."""
        return self.same_rank_inner() if self.ranks_per_replica == 1 else _configured(self._everyone)

    def abort(self, errored: bool = True) -> None:
        super().abort(errored)
        self._everyone.abort(errored=False)


def _configured(group: ProcessGroupGloo) -> Any:
    """torchft's gloo group inside ``group`` (its public ``parent``), or None where none is configured (never
    configured, or aborted: ``parent`` asserts then)."""
    try:
        return group.parent
    except AssertionError:
        return None
