"""The replicas of ``bagua run --fault-tolerant`` on this host, and its warm standbys: started, watched,
replaced.

Without standbys each replica is its own torchrun, whose ``--max-restarts`` restarts a failed replica's workers
(a new process: imports, model, wrapping, then a quorum and a heal). With ``--standby N`` the job's launcher owns
the restarts: every replica's torchrun gets ``--max-restarts 0``, N standbys (:mod:`bagua_features.fault_tolerance
.standby`) wait, built and wrapped, before their first step, and a replica that fails with restarts left
(``--max-restarts`` per replica, as without standbys) is replaced at once by a standby, which becomes that replica
(its id and index) and heals from a live peer; another standby is started in its place. With no standby ready (a
second failure before the new one started) the replica is started again cold. A failure is seen as soon as the
replica's launcher reports it (its ``failed`` event, when torchrun stopped the workers) or exits. At the job's end
the standbys are retired: they exit with status 0.

Example::

    >>> pool = ReplicaPool(command, env, JobReport(2), replicas=2, standbys=1, max_restarts=3, work=events_dir)
    >>> status = pool.run(read_events, period_s=0.05)   # then pool.close()
    >>> status
    0
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from bagua_cli.fault_tolerant_report import JobReport
from bagua_features.fault_tolerance import standby

__all__ = ["ReplicaPool", "restart_budget"]

RETIRE_WAIT_S = 15.0
"""How long the standbys may take to exit once retired at the job's end (one still importing reaches its first
step first) before they are killed."""


def restart_budget(torchrun_args: list[str]) -> tuple[int, list[str]]:
    """``--max-restarts M`` among torchrun's options (0 when absent), and the options with it set to 0: with
    standbys the job's launcher restarts a replica, not its torchrun."""
    budget, rest = 0, []
    i = 0
    while i < len(torchrun_args):
        token = torchrun_args[i]
        name, _, value = token.partition("=")
        if name in ("--max-restarts", "--max_restarts"):
            if not value and i + 1 < len(torchrun_args):
                i += 1
                value = torchrun_args[i]
            try:
                budget = int(value)
            except ValueError:
                raise ValueError(f"--max-restarts must be a non-negative integer, got {value!r}") from None
        else:
            rest.append(token)
        i += 1
    return budget, ["--max-restarts=0", *rest]


class _Spare:
    __slots__ = ("proc", "path")

    def __init__(self, proc: subprocess.Popen, path: str) -> None:
        self.proc, self.path = proc, path


class ReplicaPool:
    """This host's replicas (by index) and standbys (module doc). ``command`` starts one replica's torchrun;
    ``env`` is the job's environment; ``say`` prints a line of the report."""

    def __init__(self, command: list[str], env: dict[str, str], report: JobReport, replicas: int, standbys: int,
                 max_restarts: int, work: str, say: Callable[[str | None], None] = print) -> None:
        self.command, self.env, self.report, self.say = command, env, report, say
        self.replicas, self.standbys, self.max_restarts, self.work = replicas, standbys, max_restarts, work
        self.serving: dict[int, subprocess.Popen] = {}
        self.spares: list[_Spare] = []
        self.retired: list[subprocess.Popen] = []
        """Replaced replicas' launchers, still exiting (their status no longer counts)."""
        self.restarts: dict[int, int] = {}
        self.status = 0
        self._spares_started = 0
        self._sessions: set[int] = set()
        self._prefix = env.get("BAGUA_FT_REPLICA_ID_PREFIX", "replica_")

    @property
    def running(self) -> bool:
        return bool(self.serving)

    def replica_id(self, index: int) -> str:
        return self._prefix + str(index)

    def start(self) -> None:
        for index in range(self.replicas):
            self.serving[index] = self._start_replica(index)
        for _ in range(self.standbys):
            self._start_spare()

    def _start_replica(self, index: int) -> subprocess.Popen:
        env = {**self.env, "BAGUA_FT_REPLICA_ID": self.replica_id(index), "BAGUA_FT_REPLICA_INDEX": str(index)}
        return subprocess.Popen(self.command, env=env)

    def _start_spare(self) -> None:
        number = self._spares_started
        self._spares_started += 1
        path = os.path.join(self.work, f"standby_{number}.json")
        env = {**self.env, standby.STANDBY_ENV: path, "BAGUA_FT_REPLICA_ID": f"standby_{number}"}
        env.pop("BAGUA_FT_REPLICA_INDEX", None)
        # a session of its own: retired or killed at the end with its workers, whatever it is doing then
        proc = subprocess.Popen(self.command, env=env, start_new_session=True)
        self._sessions.add(proc.pid)
        self.spares.append(_Spare(proc, path))

    def poll(self, read_events: Callable[[], list[dict[str, Any]]]) -> None:
        """Take in the processes that ended and the replicas' new events (``read_events()``, called after polling
        the processes: an ended replica's last report is among them)."""
        ended = {index: code for index, proc in list(self.serving.items()) if (code := proc.poll()) is not None}
        for event in read_events():
            self.say(self.report.on_event(event))
            index = event.get("replica")
            if self.standbys and event.get("event") == "failed" and event.get("final") and index in self.serving \
                    and event.get("pid") == self.serving[index].pid and self._budget_left(index):
                self._replace(index)  # torchrun has stopped the workers: the standby need not wait for its exit
        for index, code in ended.items():
            if index not in self.serving or self.serving[index].poll() is None:
                continue  # replaced already (its launcher reported the failure)
            if code != 0 and self.standbys and self._budget_left(index):
                if not self.report.reported_final(index):
                    self.say(self.report.on_event({"event": "failed", "replica": index,
                                                   "cause": f"its launcher exited with status {code}"}))
                self._replace(index)
                continue
            del self.serving[index]
            self.say(self.report.on_exit(index, code, others_running=bool(self.serving)))
            if code != 0 and self.status == 0:
                self.status = code
        for spare in list(self.spares):
            if (code := spare.proc.poll()) is not None:
                self.spares.remove(spare)
                self.say(f"bagua: a standby exited with status {code} before it was needed (its output above says "
                         f"why); {len(self.spares)} left")
        self.retired = [proc for proc in self.retired if proc.poll() is None]

    def run(self, read_events: Callable[[], list[dict[str, Any]]], period_s: float) -> int:
        """Start, then poll every ``period_s`` until every replica has ended; the job's exit status."""
        self.start()
        while self.running:
            self.poll(read_events)
            time.sleep(period_s)
        return self.status

    def _budget_left(self, index: int) -> bool:
        return self.restarts.get(index, 0) < self.max_restarts

    def _replace(self, index: int) -> None:
        self.retired.append(self.serving.pop(index))
        self.restarts[index] = restart = self.restarts.get(index, 0) + 1
        warm = bool(self.spares)
        if warm:
            spare = self.spares.pop(0)
            standby.activate(spare.path, self.replica_id(index), index)
            self.serving[index] = spare.proc
            self._start_spare()  # the next failure finds one too
        else:
            self.serving[index] = self._start_replica(index)
        self.report.on_replaced(index)
        self.say(self.report.on_event({"event": "restarted", "replica": index, "restart": restart,
                                       "max_restarts": self.max_restarts, "standby": warm}))

    def close(self) -> None:
        """Retire the standbys (they exit with status 0) and let the replaced replicas' launchers finish exiting,
        for up to ``RETIRE_WAIT_S``; kill what still runs after that."""
        for spare in self.spares:
            standby.retire(spare.path)
        deadline = time.monotonic() + RETIRE_WAIT_S
        for spare in self.spares:
            try:
                spare.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for spare in self.spares:
            if spare.proc.poll() is None:
                try:
                    os.killpg(spare.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                spare.proc.wait()
        self.spares = []
        for proc in self.retired:  # a replaced replica's launcher, shutting down
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in [*self.serving.values(), *self.retired]:
            if proc.poll() is None:
                if proc.pid in self._sessions:  # an activated standby: its workers with it
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
        self.retired = []
