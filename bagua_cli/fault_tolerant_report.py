"""What ``bagua run --fault-tolerant`` says about its replicas: a line for each failure, restart and heal as
it happens, and a summary when every replica has ended. Fed with what the replicas report
(:mod:`bagua_features.fault_tolerance.events`: their launchers' ``failed`` and ``restarted``, their first rank's
``healed``) and with the replicas' exit statuses, which the job's launcher observes itself. A replica that
takes its state from a peer at step 0 (torchft's initial sync, when replicas start together) is not healed
from anything: it is neither shown nor counted.

Example::

    >>> report = JobReport(replicas=2)
    >>> report.on_event({"event": "restarted", "replica": 1, "restart": 1, "max_restarts": 1})
    'bagua: replica 1 restarted (restart 1 of 1)'
    >>> report.summary()
    'bagua: fault tolerance: 0 replica failures, 1 restart, 0 heals; 0 of 2 replicas finished'
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobReport"]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _size(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1e3:.0f} ms"


class JobReport:
    """The replicas' failures, restarts and heals, counted from their reports and exit statuses."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.failures = 0
        self.restarts = 0
        self.heals = 0
        self.finished = 0
        self.failed_for_good: dict[int, int] = {}
        """Replica -> exit status, for the replicas that ended failed."""
        self._final_reported: set[int] = set()

    def on_event(self, event: dict[str, Any]) -> str | None:
        """Count ``event``; the line to print for it (None: its launcher printed it already)."""
        kind, replica = event.get("event"), event.get("replica")
        if replica is None:  # a standby not yet needed: the job's launcher says what becomes of it
            return None
        if kind == "failed":
            self.failures += 1
            if event.get("final"):  # the replica's launcher printed the failure with its exit code
                self._final_reported.add(replica)
                return None
            return f"bagua: replica {replica} failed: {event.get('cause', 'no cause recorded')}"
        if kind == "restarted":
            self.restarts += 1
            how = ", by a warm standby" if event.get("standby") else ""
            return (f"bagua: replica {replica} restarted "
                    f"(restart {event.get('restart')} of {event.get('max_restarts')}{how})")
        if kind == "healed":
            if not event.get("step"):  # replicas starting together take the first one's weights: not a heal
                return None
            self.heals += 1
            return (f"bagua: replica {replica} healed from a live peer at step {event.get('step')} "
                    f"({_size(event.get('bytes', 0))} in {_duration(event.get('seconds', 0.0))})")
        return None

    def reported_final(self, replica: int) -> bool:
        """Whether replica ``replica``'s launcher reported its failure (and printed it) before it exited."""
        return replica in self._final_reported

    def on_replaced(self, replica: int) -> None:
        """Replica ``replica`` failed and was started again (``bagua run --fault-tolerant --standby``): the
        failure its launcher reported is the old process's."""
        self._final_reported.discard(replica)

    def on_exit(self, replica: int, status: int, others_running: bool) -> str | None:
        """Count replica ``replica``'s end with exit ``status``; the line to print for it, if any."""
        if status == 0:
            self.finished += 1
            return None
        self.failed_for_good[replica] = status
        if replica not in self._final_reported:  # its launcher itself failed: no report came
            self.failures += 1
        then = "; the others train on" if others_running else ""
        return f"bagua: replica {replica} ended with exit status {status} (out of restarts: --max-restarts){then}"

    def summary(self) -> str:
        """One line: the failures, restarts and heals, and how many replicas finished."""
        line = (f"bagua: fault tolerance: {_count(self.failures, 'replica failure')}, "
                f"{_count(self.restarts, 'restart')}, {_count(self.heals, 'heal')}; "
                f"{self.finished} of {self.replicas} replicas finished")
        if self.failed_for_good:
            line += " (" + ", ".join(f"replica {r} ended failed" for r in sorted(self.failed_for_good)) + ")"
        return line
