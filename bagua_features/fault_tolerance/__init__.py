"""Fault-tolerant mode, on torchft: a replica fails, the others train on, a replacement heals from a live peer.

Replicas (one rank, or the ranks of a node) are each started by their own torchrun; a torchft lighthouse
forms a quorum every step; between replicas the algorithms' collectives run on torchft's managed,
reconfigurable gloo group. Each step is a transaction: a step during which a participant failed is
committed nowhere. It is the process feature ``fault_tolerant`` (:mod:`.feature`): a script opts in with
``init_process_group(fault_tolerant=True)`` (or ``bagua run --fault-tolerant``, which sets
``BAGUA_FAULT_TOLERANT=1``); once the replica's own group is up, the feature marks its membership
(``membership.changes``) and starts the replica's runtime (:func:`~.replica.start`), and every wrap attaches the
runtime, refusing an algorithm that declares no ``Capabilities.fault_tolerance``. The algorithms learn all of it
from the group they are reified on (``process_group.membership``), never from this package.

The pieces: :mod:`.options` (what a replica needs), :mod:`.replica` (this replica's runtime: started, attached to
a module, whether the last step committed), :mod:`.managed_group` (the quorum's group as torch
sees it, errors reported instead of raised), :mod:`.quorum_group` (the ``BaguaProcessGroup`` the
algorithm is reified on), :mod:`.state` (the transaction's copy, healing, the joiner check),
:mod:`.replica_groups` (the groups torchft reconfigures per quorum), :mod:`.runtime` (the Manager and the
transaction), :mod:`.sampler` (the data shard following the quorum), :mod:`.hang` (a replica whose step
hangs leaves), :mod:`.standby` (a warm standby waits before its first step until it replaces a failed replica). ``bagua run --fault-tolerant`` (``bagua_cli/fault_tolerant.py``) starts the lighthouse. Without it, fail-fast stays the default.

Example (each replica: ``bagua run --fault-tolerant --nproc_per_node=1 train.py``)::

    >>> bagua.init_process_group(fault_tolerant={"min_replicas": 2, "timeout_s": 10})
    >>> model = model.with_bagua([optimizer], "gradient_allreduce")
    >>> sampler = QuorumSampler(len(data), batch_size=32)
    >>> while sampler.epoch < epochs:
    ...     if (indices := sampler.next_indices(model)) is None:
    ...         continue                                  # the quorum's epoch ended
    ...     optimizer.zero_grad(); loss(model(x[indices]), y[indices]).backward(); optimizer.step()
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_features.fault_tolerance.current import current_runtime
from bagua_features.fault_tolerance.options import FaultTolerantOptions
from bagua_features.fault_tolerance.replica import attach, last_step_committed, resolve_options, start
from bagua_features.fault_tolerance.sampler import QuorumSampler
from bagua_features.fault_tolerance.standby import wait_for_activation

__all__ = ["FaultTolerantOptions", "QuorumSampler", "current_runtime", "last_step_committed", "start", "attach",
           "resolve_options", "wait_for_activation", "bagua_register_features"]


@hookimpl
def bagua_register_features() -> list[type]:
    """The process feature ``fault_tolerant`` (:mod:`.feature`)."""
    from bagua_features.fault_tolerance.feature import FaultTolerantFeature

    return [FaultTolerantFeature]
