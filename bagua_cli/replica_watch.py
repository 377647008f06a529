"""A fault-tolerant replica's launcher (its own torchrun, started by ``bagua run --fault-tolerant``) reports
what happens to its workers to the job's launcher (:mod:`bagua_features.fault_tolerance.events`): a failure
that a restart follows, each restart, and the failure that ends the replica.

What it observes: torchrun's agent publishes ``workers.<role>.remaining_restarts`` and
``workers.<role>.<state>`` each time it checks its workers (torchelastic's public metrics,
``torch.distributed.elastic.metrics``); a ``failed`` (or ``unhealthy``) state with restarts left is a failure
that a restart follows. The cause is what the workers recorded in their error files (bagua's failure
handling writes one for an uncaught exception); a worker killed by a signal records none. A restart is
torchrun starting the workers again (``TORCHELASTIC_RESTART_COUNT`` > 0 in their environment).

Example::

    >>> watch_replica()                 # bagua run, in a replica of bagua run --fault-tolerant
    >>> replica_index()
    1
"""

from __future__ import annotations

import os

from torch.distributed.elastic import metrics

from bagua_cli import worker_logs
from bagua_features.fault_tolerance import events, standby

__all__ = ["watch_replica", "replica_index", "failure_cause", "report_final_failure"]

_watching: list[bool] = []


def replica_index() -> int | None:
    """This launcher's replica under ``bagua run --fault-tolerant`` (``BAGUA_FT_REPLICA_INDEX``, or the replica
    an activated standby stands for), else None."""
    return standby.replica_index()


def failure_cause() -> str:
    """What the latest attempt's workers recorded about their failure, in one line."""
    recorded = worker_logs.recorded_errors()
    if not recorded:
        return ("a worker exited without recording an error (killed by a signal, or it crashed or left: its last "
                "lines say)")
    rank = min(recorded)
    first = recorded[rank].strip().splitlines()[0] if recorded[rank].strip() else "(no message)"
    return f"rank {rank}: {first}"


class _FailureMetrics(metrics.MetricHandler):
    """Turns the agent's metrics into ``failed`` events (with restarts left: the final failure is reported
    by the launcher itself, :func:`report_final_failure`, with torchrun's exit code)."""

    def __init__(self) -> None:
        self.remaining = 0

    def emit(self, metric_data: metrics.MetricData) -> None:
        name = metric_data.name
        if name.endswith(".remaining_restarts"):
            self.remaining = int(metric_data.value)
        elif name.endswith((".failed", ".unhealthy")) and self.remaining > 0:
            events.report("failed", cause=failure_cause(), restarts_left=self.remaining)


def _on_attempt(restart: int, max_restarts: int) -> None:
    if restart > 0:
        events.report("restarted", restart=restart, max_restarts=max_restarts)


def watch_replica() -> None:
    """Report this replica's failures and restarts (once per process; nothing outside a fault-tolerant job)."""
    if _watching or not os.environ.get(events.EVENTS_ENV):
        return
    _watching.append(True)
    metrics.configure(_FailureMetrics(), group="torchelastic")
    worker_logs.on_attempt(_on_attempt)


def report_final_failure(cause: str) -> None:
    """The replica is out of restarts: its launcher exits with this ``cause`` (torchrun's first failure)."""
    events.report("failed", cause=cause, restarts_left=0, final=True)
