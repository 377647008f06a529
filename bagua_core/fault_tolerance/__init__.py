"""Fault-tolerant mode, on torchft: a replica fails, the others train on, a replacement heals from a live peer.

Replicas (one rank, or the ranks of a node) are each started by their own torchrun; a torchft lighthouse
forms a quorum every step; between replicas the algorithms' collectives run on torchft's managed,
reconfigurable gloo group. Each step is a transaction: a step during which a participant failed is
committed nowhere. A script opts in with ``init_process_group(fault_tolerant=True)`` (or
``bagua run --fault-tolerant``, which sets ``BAGUA_FAULT_TOLERANT=1``): ``bagua_core.bootstrap`` then
marks the replica's own group (``membership.changes``) and calls :func:`start`; ``with_bagua`` attaches the
runtime, refusing an algorithm that declares no ``Capabilities.fault_tolerance``. The algorithms learn
all of it from the group they are reified on (``process_group.membership``), never from this package.

The pieces: :mod:`.options` (what a replica needs), :mod:`.managed_group` (the quorum's group as torch
sees it, errors reported instead of raised), :mod:`.quorum_group` (the ``BaguaProcessGroup`` the
algorithm is reified on), :mod:`.state` (the transaction's copy, healing, the joiner check),
:mod:`.replica_groups` (the groups torchft reconfigures per quorum), :mod:`.runtime` (the Manager and the
transaction), :mod:`.sampler` (the data shard following the quorum), :mod:`.hang` (a replica whose step
hangs leaves). ``bagua run --fault-tolerant`` (``bagua_core/cli/fault_tolerant.py``) starts the lighthouse. Without it, fail-fast stays the default.

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

import atexit
from typing import Any

from bagua_core.fault_tolerance.current import current_runtime, set_runtime
from bagua_core.fault_tolerance.options import FaultTolerantOptions, enabled_by_env
from bagua_core.fault_tolerance.sampler import QuorumSampler
from bagua_core.runtime.exceptions import BaguaConfigError

__all__ = ["FaultTolerantOptions", "QuorumSampler", "current_runtime", "last_step_committed", "start", "attach",
           "resolve_options"]

def resolve_options(fault_tolerant: Any) -> FaultTolerantOptions | None:
    """``init_process_group``'s ``fault_tolerant`` argument as options, or None for fail-fast: None
    follows ``BAGUA_FAULT_TOLERANT``; True/False; a dict of options; a ``FaultTolerantOptions``."""
    if isinstance(fault_tolerant, FaultTolerantOptions):
        return fault_tolerant
    if fault_tolerant is None:
        return FaultTolerantOptions.from_env() if enabled_by_env() else None
    if fault_tolerant is True:
        return FaultTolerantOptions.from_env()
    if fault_tolerant is False:
        return None
    if isinstance(fault_tolerant, dict):
        return FaultTolerantOptions.from_env(**fault_tolerant)
    raise BaguaConfigError(f"init_process_group(fault_tolerant=...) takes None, a bool, a dict of options or "
                           f"FaultTolerantOptions, got {type(fault_tolerant).__name__}")


def start(options: FaultTolerantOptions) -> Any:
    """Start this replica's runtime (after the replica's own process group is up)."""
    # torchft is an optional dependency (the [ft] extra): imported only when a replica starts
    from bagua_core.fault_tolerance.runtime import FaultTolerantRuntime

    previous = current_runtime()
    if previous is not None:
        previous.shutdown()
    runtime = FaultTolerantRuntime(options)
    set_runtime(runtime)
    atexit.register(_stop)  # after init_process_group's: runs first, before the groups are destroyed
    return runtime


def _stop() -> None:
    runtime = set_runtime(None)
    if runtime is not None:
        runtime.shutdown()


def last_step_committed() -> bool:
    """Whether the training step that ``optimizer.step()`` just closed counts: in fault-tolerant mode True when
    every replica of its quorum committed it and False when it was discarded on every replica (its update
    undone); in fail-fast mode always True (a step that returns is done on every rank). For a script's own
    logging and checkpoints. With an algorithm whose transaction is a round of steps (``commit="at_round"``,
    the round-based algorithms), a step inside a round is True (it stands unless its round fails) and the round's last
    step says whether the round committed: False undoes the whole round (the module's step counter goes back to
    the round's start).

    Example::

        >>> optimizer.step()
        >>> if bagua.last_step_committed():
        ...     steps_done += 1
    """
    runtime = current_runtime()
    return True if runtime is None else bool(runtime.decision)


def attach(module: Any, reset: Any) -> None:
    """Called by ``with_bagua``: in fault-tolerant mode, put ``module`` under the step transaction (``reset(module)``
    rebuilds its buckets on a new quorum's group)."""
    runtime = current_runtime()
    if runtime is not None:
        runtime.attach(module, reset)

