"""This replica's runtime in fault-tolerant mode: started when the process starts (the feature's
``process_started``), attached to every module wrapped in it, stopped at exit; whether the last step committed.

Example::

    >>> optimizer.step()
    >>> if last_step_committed():
    ...     steps_done += 1
"""

from __future__ import annotations

import atexit
from typing import Any

from bagua_core.api import BaguaConfigError
from bagua_features.fault_tolerance.current import current_runtime, set_runtime
from bagua_features.fault_tolerance.options import FaultTolerantOptions, enabled_by_env

__all__ = ["attach", "last_step_committed", "resolve_options", "start"]


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
    from bagua_features.fault_tolerance.runtime import FaultTolerantRuntime

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

