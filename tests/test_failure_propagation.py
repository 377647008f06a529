"""The first failure reaches every rank in seconds and names the rank and the cause: the communication
thread stops after a failure, the store host's own failure is still learned, a failure cascades over
three ranks, and under ``bagua run`` the launcher names the first failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

from bagua_core.runtime.communication.worker import CommunicationWorker
from bagua_core.runtime.exceptions import GroupAbortedError
from tests.distributed import free_port, run_workers, run_workers_outcomes
from tests.models import SmallNet, batch


def test_the_communication_thread_runs_nothing_after_a_failure() -> None:
    worker = CommunicationWorker("test")
    ran: list[int] = []
    first = worker.submit(lambda: 1 / 0)
    later = worker.submit(ran.append, 1)
    with pytest.raises(ZeroDivisionError):
        worker.synchronize()
    assert isinstance(first.exception(), ZeroDivisionError)
    assert isinstance(later.exception(), GroupAbortedError) and "division by zero" in str(later.exception())
    assert ran == []  # the later bucket's collective was never issued
    worker.shutdown()


def _train_until(rank: int, failing_rank: int) -> dict:
    model = SmallNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], "gradient_allreduce")
    try:
        for step in range(6):
            if rank == failing_rank and step == 2:
                raise ValueError(f"bad batch on rank {rank} at {time.time()!r}")  # the time: when it failed
            x, y = batch(rank, step)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    except Exception as exc:
        if rank == failing_rank:
            raise  # uncaught: reported to the job, as bagua run's hook does
        return {"type": type(exc).__name__, "error": str(exc), "at": time.time()}
    return {"type": None}


@pytest.mark.parametrize("world_size,failing_rank", [(2, 0), (3, 2)])
def test_every_rank_names_the_rank_that_failed(world_size: int, failing_rank: int) -> None:
    """Rank 0 hosts the store (it lingers until the others learned its failure); with three ranks the
    failure cascades to a rank that was waiting on another healthy rank."""
    outcomes = run_workers_outcomes(_train_until, world_size, failing_rank, timeout=60,
                                    env={"BAGUA_COMM_TIMEOUT_S": "30"})
    assert outcomes[failing_rank].status == "error" and "bad batch" in outcomes[failing_rank].value
    for rank, outcome in enumerate(outcomes):
        if rank == failing_rank:
            continue
        assert outcome.status == "ok", outcome.value
        seen = outcome.value
        assert seen["type"] == "PeerFailureError", seen
        assert f"rank {failing_rank} failed first" in seen["error"] and "ValueError: bad batch" in seen["error"], seen
        raised = float(re.search(r"bad batch on rank \d+ at ([\d.]+)", outcomes[failing_rank].value).group(1))
        assert seen["at"] - raised < 15  # learned from the failure, not from the 30 s timeout (15: a loaded machine)


SCRIPT = """
import sys, torch
import bagua_core as bagua
bagua.init_process_group()
rank = bagua.get_rank()
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model = model.with_bagua([optimizer], "gradient_allreduce")
for step in range(5):
    if rank == 1 and step == 2:
        raise RuntimeError("boom on rank 1")
    optimizer.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
"""


def test_bagua_run_names_the_first_failure(tmp_path) -> None:
    script = tmp_path / "boom.py"
    script.write_text(SCRIPT)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bagua_cli", "run", "--standalone", "--nproc_per_node=2",
                           f"--master-port={free_port()}", str(script)], capture_output=True, text=True, timeout=270,
                          env=dict(os.environ, OMP_NUM_THREADS="1", BAGUA_COMM_TIMEOUT_S="900"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-4000:]
    assert "[rank1]: RuntimeError: boom on rank 1" in output  # its traceback, once
    assert output.count("boom on rank 1") == 2  # the traceback's line that raised it, and the error
    assert "[rank0]: bagua: stopped: rank 1 failed first (RuntimeError)" in output
    assert "bagua: workers failed; first failure: rank 1 (exit code 1): RuntimeError (its traceback is above" in output
    # far below BAGUA_COMM_TIMEOUT_S: nobody waited for the timeout (the bound leaves room for a loaded machine:
    # with 8 test workers on 2 cores the job's start alone took over a minute once)
    assert time.monotonic() - started < 240


def test_nccl_groups_are_aborted(monkeypatch) -> None:
    """After a failure NCCL groups are aborted so their collectives in flight return (gloo has no abort
    that reaches the peers: they learn from the closed connections and the watchdog)."""
    import torch.distributed as dist

    from bagua_core.runtime.failure import abort

    class FakeGroup:
        aborted = False

        def abort(self) -> None:
            self.aborted = True

    nccl, gloo = FakeGroup(), FakeGroup()
    monkeypatch.setattr(abort, "_process_groups", lambda: [nccl, gloo])
    monkeypatch.setattr(dist, "get_backend", lambda group: "cpu:gloo,cuda:nccl" if group is nccl else "gloo")
    assert abort.abort_process_groups() == 1
    assert nccl.aborted and not gloo.aborted


def _watched_groups(rank: int) -> dict:
    import gc

    import torch.distributed as dist

    from bagua_core.api import BaguaProcessGroup
    from bagua_core.runtime.failure import abort
    from bagua_core.runtime.process_group import from_torch_group

    mine = BaguaProcessGroup.new_torch_group([0, 1])     # an algorithm's own group (a topology's edge)
    users = dist.new_group([0, 1])                      # handed to bagua: its communicators watch it
    bagua_group = from_torch_group(users)
    unseen = dist.new_group([0, 1])                     # a group of the user's that bagua never saw
    watched = abort._process_groups()
    found = {"world": dist.group.WORLD in watched, "mine": mine in watched, "users": users in watched,
             "unseen": unseen in watched}
    count = len(watched)
    del watched
    dist.destroy_process_group(mine)                    # torch lets go of it; bagua does not hold it either
    del mine
    gc.collect()
    found["held weakly"] = len(abort._process_groups()) == count - 1
    del bagua_group
    return found


def test_the_groups_bagua_makes_or_is_given_are_aborted() -> None:
    """What a failure aborts: the default group, the groups bagua made and those it was handed, not a group of
    the user's it never saw; held weakly, so a group dropped is not kept alive for it."""
    for found in run_workers(_watched_groups, 2, timeout=120):
        assert found == {"world": True, "mine": True, "users": True, "unseen": False, "held weakly": True}


def test_the_error_file_appears_whole_or_not_at_all(tmp_path, monkeypatch) -> None:
    """torchrun reads the error file of a worker it is killing: a write cut short leaves no file behind (a
    half-written one made torchrun raise JSONDecodeError instead of naming the first failure)."""
    import json

    from bagua_core.runtime.failure import uncaught

    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))

    def cut_short(data, fh):
        fh.write('{"message": {"mess')
        fh.flush()
        raise KeyboardInterrupt  # the SIGTERM of the agent arrives here

    monkeypatch.setattr(uncaught.json, "dump", cut_short)
    with pytest.raises(KeyboardInterrupt):
        uncaught._write_elastic_error_file(RuntimeError("boom"), 0)
    assert not path.exists()
    monkeypatch.undo()
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    uncaught._write_elastic_error_file(RuntimeError("boom"), 0)
    assert json.loads(path.read_text())["message"]["message"] == "RuntimeError: boom"
    assert json.loads(path.read_text())["message"]["extraInfo"]["bagua_shown_by"] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["error.json"]


def test_launcher_names_the_workers_errors_when_torchrun_cannot(monkeypatch, capsys) -> None:
    """torchrun failing to collect the results itself still ends with each worker's last error."""
    import json

    from torch.distributed import run as torchrun

    from bagua_cli import launch, worker_logs

    def failing_main(args):
        raise json.JSONDecodeError("Expecting value", "", 0)

    tails = {0: "Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: boom on rank 0\n", 1: ""}
    monkeypatch.setattr(torchrun, "main", failing_main)
    monkeypatch.setattr(worker_logs, "captured_ranks", lambda: [0, 1])
    monkeypatch.setattr(worker_logs, "stderr_tail", lambda rank, wait_s=2.0: tails[rank])
    assert launch._launch(["--nproc_per_node=2", "x.py"]) == 1
    out = capsys.readouterr().out
    assert "torchrun could not report them (JSONDecodeError: Expecting value" in out, out
    assert "local rank 0's stderr ended with: RuntimeError: boom on rank 0" in out, out
    assert "local rank 1" not in out, out


def test_stopping_the_watchdog_waits_for_its_store_call(monkeypatch) -> None:
    """``stop()`` returns only once the thread has left the store: a daemon thread still inside a C++
    store call at interpreter exit aborts the process (a CI run: "terminate called without an active
    exception", exit -6, after the script's work was done)."""
    import threading

    from bagua_core.runtime.failure import record, watchdog

    inside, release = threading.Event(), threading.Event()

    class SlowStore:
        def clone(self):
            return self

        def check(self, keys):
            inside.set()
            release.wait(0.5)  # a store call in flight
            return False

    monkeypatch.setattr(record.state, "store", SlowStore())
    monkeypatch.setattr(watchdog, "POLL_S", 0.001)
    dog = watchdog.Watchdog()
    dog.start()
    assert inside.wait(5.0)
    dog.stop()
    assert not dog.is_alive()


def test_a_rank_blocked_in_a_collective_says_its_line_from_the_watchdog(monkeypatch, capsys) -> None:
    """On gloo a peer's failure cannot abort a collective in flight: the main thread returns only once the failing
    rank has exited, and that rank waits (up to 10 s) for this rank's line before it exits. The watchdog says the
    line (once: the main thread's hook, when it raises at last, says nothing more) and marks it said."""
    import datetime

    import torch.distributed as dist

    from bagua_core.runtime.failure import lines, record, watchdog

    store = dist.HashStore()
    store.set_timeout(datetime.timedelta(seconds=5))
    failed = record.FailureRecord(1, "an uncaught exception in the main thread", "ValueError: bad batch")
    store.set("first", failed.to_bytes())
    store.set("said_1", b"1")  # rank 1 has printed its traceback
    for name, value in dict(store=store, rank=0, world_size=2, failure=None, own=False, main_thread_told=False,
                            started=True, line_said=False).items():
        monkeypatch.setattr(record.state, name, value)
    monkeypatch.setenv("BAGUA_VERBOSE", "0")
    monkeypatch.setattr(watchdog, "POLL_S", 0.01)
    monkeypatch.setattr(watchdog, "GRACE_S", 0.01)
    interrupted = []
    monkeypatch.setattr(watchdog, "_interrupt_main_thread", interrupted.append)
    dog = watchdog.Watchdog()
    dog.start()
    dog.join(10.0)
    assert not dog.is_alive()
    assert interrupted == [failed]  # the main thread is interrupted too
    assert store.check(["said_0"])  # rank 1 may exit now
    assert lines.say_stopped(1, "ValueError") is False  # the main thread's hook, later: nothing more
    assert capsys.readouterr().err == "[rank0]: bagua: stopped: rank 1 failed first (ValueError)\n"


_EXIT_WHILE_POLLING = """
import atexit, datetime, sys
import torch.distributed as dist
from bagua_core.runtime.failure import record, watchdog
record.state.store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=5))
watchdog.POLL_S = 0.0  # polls the store without a pause, as if the exit came mid-call
for _ in range(8):  # eight, to widen the window: each one's store call can be in flight at the exit
    dog = watchdog.Watchdog()
    dog.start()
    atexit.register(dog.stop)  # destroy_process_group stops it at exit
"""


def test_a_process_exits_cleanly_while_its_watchdog_polls(tmp_path) -> None:
    """The interpreter's exit with the watchdog polling (the failure's real path): exit code 0, no abort.
    Before ``stop()`` waited for the thread, 13 of 20 such processes aborted (exit -6)."""
    script = tmp_path / "exit_while_polling.py"
    script.write_text(_EXIT_WHILE_POLLING)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for attempt in range(3):
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"attempt {attempt}: exit code {done.returncode}: {done.stderr[-2000:]}"
