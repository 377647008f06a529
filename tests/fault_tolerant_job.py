"""A fault-tolerant job for the tests: a torchft lighthouse in the test process and replicas as
processes (``tests/fault_tolerant_replica.py``), each its own job of one rank. Every wait has a
deadline and names the replica it waited for; nothing synchronises on fixed sleeps (the logs are polled).

A replica is a process of its own, as under torchrun: by default forked from the tests' preloaded server
(``tests.distributed.FORKSERVER``, with torch, torchft and bagua_core imported) and running the replica's
``main()`` with its own environment, arguments and output file, which saves the 2.5 s of CPU each fresh
interpreter spends on imports; ``Job(tmp, preloaded=False)`` starts a fresh ``python fault_tolerant_replica.py``
instead (for timings that must count the imports, ``tests/fault_tolerant_measure.py``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.distributed import FORKSERVER, free_port

REPLICA = Path(__file__).with_name("fault_tolerant_replica.py")
PLUGIN_SOURCE = Path(__file__).resolve().parents[1] / "plugins_example"
"""The example plugin package's source: replicas import it first, so local_sgd is this checkout's."""
TIMEOUT_S = 4.0
"""BAGUA_FT_TIMEOUT_S of the replicas: a collective with a dead or hung peer fails after this."""
JOIN_TIMEOUT_MS = 1500
HEARTBEAT_TIMEOUT_MS = 1500
HANG_TIMEOUT_S = 15.0
"""BAGUA_FT_HANG_TIMEOUT_S of the replicas: a replica whose step hangs this long leaves the job. A step's window
opens after its own rank's heal; a restarted sharded replica's rank can wait that long in its first collective
for a sibling still healing at a load of 20-30 on 2 cores (8 s was taken for a hang there)."""


def _run_replica(argv: list[str], env: dict[str, str], output: str) -> None:
    """In a process forked from the preloaded server: what ``python fault_tolerant_replica.py ARGV`` with
    ``env`` and its output appended to ``output`` does."""
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    sys.path.insert(0, str(PLUGIN_SOURCE))  # as PYTHONPATH does for a fresh interpreter
    sys.argv = [str(REPLICA), *argv]
    from tests import fault_tolerant_replica

    fault_tolerant_replica.STARTED = time.time()
    fault_tolerant_replica.main()


class _Forked:
    """A forked replica with the part of ``subprocess.Popen``'s interface the tests use."""

    def __init__(self, process) -> None:
        self.process = process
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(str(REPLICA), timeout or 0.0)
        return self.process.exitcode

    def send_signal(self, sig: int) -> None:
        if self.process.exitcode is None:
            os.kill(self.pid, sig)


class Job:
    def __init__(self, tmp: Path, preloaded: bool = True) -> None:
        from torchft.coordination import LighthouseServer

        self.tmp = tmp
        self.preloaded = preloaded
        self.lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=JOIN_TIMEOUT_MS,
                                           heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
        port = self.lighthouse.address().rsplit(":", 1)[1]
        self.address = f"http://127.0.0.1:{port}"
        self.procs: dict[str, subprocess.Popen | _Forked] = {}
        self.stop_file = tmp / "stop"

    def start(self, name: str, *args: str, steps: int = 100_000, step_delay_s: float = 0.02,
              ranks: int = 1) -> list[subprocess.Popen | _Forked]:
        """Start replica ``name`` with ``ranks`` ranks (processes ``name`` or ``name.<rank>``); it trains until
        :meth:`stop` (or ``steps``), pausing ``step_delay_s`` after each step so that a replica alone does
        not run far ahead of one that is still starting."""
        port = str(free_port())
        started = []
        for rank in range(ranks):
            process = name if ranks == 1 else f"{name}.{rank}"
            env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(rank),
                   "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(ranks),
                   "TORCHFT_LIGHTHOUSE": self.address, "BAGUA_FAULT_TOLERANT": "1",
                   "BAGUA_FT_TIMEOUT_S": str(TIMEOUT_S), "BAGUA_FT_REPLICA_ID": name,
                   "BAGUA_FT_HANG_TIMEOUT_S": str(HANG_TIMEOUT_S), "BAGUA_COMM_TIMEOUT_S": "30",
                   "OMP_NUM_THREADS": "1", "RUST_LOG": "warn",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN_SOURCE), os.environ.get("PYTHONPATH")]))}
            argv = ["--records", str(self.log_path(process)), "--steps", str(steps), "--stop", str(self.stop_file),
                    "--step-delay", str(step_delay_s), *args]
            output = self.tmp / f"{process}.out"
            if self.preloaded:
                forked = FORKSERVER.Process(target=_run_replica, args=(argv, env, str(output)), name=process)
                forked.start()
                proc: subprocess.Popen | _Forked = _Forked(forked)
            else:
                with open(output, "ab") as out:
                    proc = subprocess.Popen([sys.executable, str(REPLICA), *argv], env=env, stdout=out,
                                            stderr=subprocess.STDOUT)
            self.procs[process] = proc
            started.append(proc)
        return started

    def log_path(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def records(self, name: str) -> list[dict]:
        path = self.log_path(name)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def committed(self, name: str, pid: int | None = None, quorum: int | None = None) -> list[dict]:
        return [r for r in self.records(name) if r["committed"] and (pid is None or r["pid"] == pid)
                and (quorum is None or r["quorum"] == quorum)]

    def output(self, name: str) -> str:
        return (self.tmp / f"{name}.out").read_text(errors="replace")

    def _outputs(self, name: str) -> str:
        """The end of ``name``'s output, then of its replica's other ranks' (``a.0``: also ``a.1``'s)."""
        text = self.output(name)[-3000:]
        replica = name.rsplit(".", 1)[0] if "." in name else None
        for other in self.procs:
            if replica is not None and other != name and other.rsplit(".", 1)[0] == replica:
                text += f"\n--- {other!r}'s output ends:\n{self.output(other)[-1500:]}"
        return text

    def wait_for(self, what: str, condition: Callable[[], bool], timeout_s: float, replica: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            proc = self.procs.get(replica)
            if proc is not None and proc.poll() is not None and not condition():
                raise AssertionError(f"replica {replica!r} exited ({proc.returncode}) before {what}; its output "
                                     f"ends:\n{self._outputs(replica)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"replica {replica!r} hung: not {what} within {timeout_s:g} s; its output "
                                     f"ends:\n{self._outputs(replica)}")
            time.sleep(0.1)

    def wait_exit(self, name: str, timeout_s: float) -> int:
        try:
            return self.procs[name].wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"replica {name!r} hung: did not exit within {timeout_s:g} s; its output ends:\n"
                                 f"{self.output(name)[-3000:]}") from None

    def stop(self) -> None:
        self.stop_file.write_text("stop")

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
        self.lighthouse.shutdown()
