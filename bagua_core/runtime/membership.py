"""``Membership``: what an algorithm is told about who trains with it.

An algorithm is reified on a process group (``Algorithm.reify(process_group)``); the group carries its
``membership``, so an impl learns from what it is handed, never by importing the fault-tolerance
package or testing the group's type. Fail-fast jobs (the default) have :data:`FIXED` membership: the
same ranks from the first step to the last. In a fault-tolerant job (``docs/fault_tolerance.md``)
replicas leave and join between steps: the replica's own group says so at wrap time, and every
quorum's group (the impl is reified again on each one, its state carried over) also names the quorum
and the group the replicas communicate on.

Example::

    >>> membership = process_group.membership
    >>> if membership.changes:                       # replicas may come and go between steps
    ...     comm_group = membership.between_replicas  # collectives between replicas go here, no new group
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FIXED", "Membership", "group_failure"]


@dataclass(frozen=True)
class Membership:
    """Who trains with the group an impl is reified on, and how that may change."""

    changes: bool = False
    """True in a fault-tolerant job: between steps replicas may leave (a failed step is committed nowhere)
    and join (healed from a live replica); the impl is reified again on every new quorum's group, and
    what depends on the participants (chunking, peers, rings, denominators) is derived from that group."""
    quorum_id: int | None = None
    """Set on a quorum's group: the quorum it is (None on the replica's own group, where a fault-tolerant
    job wraps the model before its first quorum)."""
    between_replicas: Any = None
    """On a quorum's group: the torch process group over every rank of the quorum's replicas (for a model
    sharded over each replica's ranks: over the ranks holding this rank's shard), which the runtime
    reconfigures per quorum. An impl that needs a communicator of its own builds it on this group
    (creating a new torch group would be a collective the other replicas never join)."""
    commit: str = "every step"
    """The commit rule: "every step" (fail-fast: a step that returns is done everywhere), or in a
    fault-tolerant job "quorum" (a step counts only where every replica of the quorum finished it; a step
    during which a participant failed is rolled back on every replica)."""

    @property
    def on_quorum(self) -> bool:
        """Whether the group is one quorum's (reified again, with its state, on the next quorum's)."""
        return self.quorum_id is not None


FIXED = Membership()
"""A fail-fast job's membership: the same ranks throughout."""


def group_failure(group: Any) -> BaseException | None:
    """The error that failed a collective on ``group`` (a torch process group, or a communicator's
    ``torch_group``) in this step, or None. Only a quorum's group in fault-tolerant mode keeps one: there a
    failed collective does not raise (the step runs to its end and is committed nowhere), so an algorithm
    that must not apply a partial result (an average a peer left half done) asks this first. In a fail-fast
    job a failure raises where it happens and this is always None.

    Example::

        >>> if group_failure(comm.torch_group) is not None:
        ...     return                      # the round failed: keep the weights as they were
    """
    return getattr(group, "error", None)  # the quorum's managed group records it (fault_tolerance.managed_group)
