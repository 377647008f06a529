"""Warm standbys (``bagua run --fault-tolerant --standby N``): the standby's side (it waits, is activated as a
replica or retired), the launcher's pool (a failed replica replaced by a standby at once, another standby started,
the restart budget kept, the standbys retired at the end), and the options. The replicas and standbys here are
small scripts that play their part through the same files a real one uses; the real job under one kill is
``tests/test_fault_tolerant_train_restart.py::test_a_kill_is_replaced_by_a_warm_standby_that_heals``."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from bagua_cli import worker_logs
from bagua_cli.fault_tolerant import run_fault_tolerant, split_fault_tolerant_args
from bagua_cli.fault_tolerant_replicas import ReplicaPool, restart_budget
from bagua_cli.fault_tolerant_report import JobReport
from bagua_features.fault_tolerance import events, standby


def test_the_restart_budget_is_taken_from_torchruns_options() -> None:
    assert restart_budget(["--max-restarts=3", "-m", "job"]) == (3, ["--max-restarts=0", "-m", "job"])
    assert restart_budget(["--max_restarts", "2", "x.py"]) == (2, ["--max-restarts=0", "x.py"])
    assert restart_budget(["x.py"]) == (0, ["--max-restarts=0", "x.py"])
    with pytest.raises(ValueError, match="--max-restarts must be a non-negative integer, got 'two'"):
        restart_budget(["--max-restarts", "two", "x.py"])


def test_standby_options_are_checked_before_anything_starts() -> None:
    options, rest = split_fault_tolerant_args(["--fault-tolerant", "--standby", "1", "train.py"])
    assert options.standby == 1 and rest == ["train.py"]
    with pytest.raises(ValueError, match=r"--standby 1 replaces a failed replica, which is a restart: give "
                                         r"--max-restarts M"):
        run_fault_tolerant(options, rest)  # (raised before the lighthouse starts)
    with pytest.raises(ValueError, match="--standby must be a non-negative integer, got -1"):
        split_fault_tolerant_args(["--fault-tolerant", "--standby", "-1", "train.py"])


def test_a_standby_waits_until_activated_then_is_that_replica(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(standby, "_activated", [])
    path = str(tmp_path / "standby_0.json")
    monkeypatch.setenv(standby.STANDBY_ENV, path)
    monkeypatch.setenv(events.EVENTS_ENV, str(tmp_path / "events.jsonl"))
    monkeypatch.setenv("BAGUA_FT_REPLICA_ID", "standby_0")
    monkeypatch.delenv("BAGUA_FT_REPLICA_INDEX", raising=False)  # (the index the activation sets: conftest undoes it)
    assert standby.is_standby() and standby.replica_index() is None
    events.report("failed", final=True)  # a standby not yet needed stands for no replica
    timer = threading.Timer(0.3, standby.activate, (path, "replica_2", 2))
    timer.start()
    before = time.time()
    activated = standby.wait_for_activation()
    timer.join()
    assert activated >= before + 0.25  # it waited for the activation
    assert os.environ["BAGUA_FT_REPLICA_ID"] == "replica_2" and os.environ["BAGUA_FT_REPLICA_INDEX"] == "2"
    assert standby.replica_index() == 2 and standby.wait_for_activation() == activated  # at once, the same
    events.report("healed", step=3)
    read, _ = events.read_new(str(tmp_path / "events.jsonl"), 0)
    assert [(e["event"], e["replica"], e["pid"]) for e in read] == [("failed", None, os.getpid()),
                                                                    ("healed", 2, os.getpid())]
    assert JobReport(3).on_event(read[0]) is None  # the launcher says what becomes of a standby itself


def test_a_retired_standby_exits_with_status_0(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(standby, "_activated", [])
    path = str(tmp_path / "standby_0.json")
    monkeypatch.setenv(standby.STANDBY_ENV, path)
    standby.retire(path)
    with pytest.raises(SystemExit) as exited:
        standby.wait_for_activation()
    assert exited.value.code == 0
    standby.activate(path, "replica_0", 0)  # an activation is never undone by a late retirement
    standby.retire(path)
    assert standby.activation()["index"] == 0


def test_no_standby_no_wait(monkeypatch) -> None:
    monkeypatch.delenv(standby.STANDBY_ENV, raising=False)
    monkeypatch.setenv("BAGUA_FT_REPLICA_INDEX", "1")
    assert standby.wait_for_activation() is None and standby.replica_index() == 1


# A replica or standby as the pool starts it: a standby waits for its file (retired: exit 0; activated: it
# records its index and finishes); replica FAIL_INDEX fails once (its launcher's final report first, with its pid,
# then it lingers LINGER_S before exiting 1, as torchrun's agent does while it shuts down); the others finish.
_PLAYER = r'''
import json, os, sys, time, types
for name in ("bagua_features", "bagua_features.fault_tolerance"):  # the two modules it uses, not torch's import
    sys.modules[name] = types.ModuleType(name)
    sys.modules[name].__path__ = [os.path.join(os.environ["REPO"], *name.split("."))]
from bagua_features.fault_tolerance import events, standby
work = os.environ["WORK"]
if standby.is_standby():
    standby.wait_for_activation()  # (exits 0 when retired)
    index = os.environ["BAGUA_FT_REPLICA_INDEX"]
    open(os.path.join(work, f"served_{index}_{os.getpid()}"), "w").write(os.environ["BAGUA_FT_REPLICA_ID"])
    time.sleep(0.5)
    sys.exit(int(os.environ.get("STANDBY_EXIT", "0")))
index = os.environ["BAGUA_FT_REPLICA_INDEX"]
marker = os.path.join(work, f"failed_{index}")
if index == os.environ["FAIL_INDEX"] and not os.path.exists(marker):
    open(marker, "w").write(str(time.time()))
    if os.environ.get("REPORT") == "1":
        events.report("failed", cause="rank 0 (exit code -9): Signal 9", restarts_left=0, final=True)
    time.sleep(float(os.environ["LINGER_S"]))
    open(marker + ".exit", "w").write(str(time.time()))
    sys.exit(1)
time.sleep(float(os.environ.get("RUN_S", "3")))
'''


def _run_pool(tmp_path: Path, standbys: int, max_restarts: int, report_first: bool, linger_s: float = 0.0,
              replicas: int = 2, extra: dict[str, str] | None = None) -> tuple[ReplicaPool, JobReport, list[str]]:
    script = tmp_path / "player.py"
    script.write_text(_PLAYER)
    events_path = tmp_path / "events.jsonl"
    env = {**os.environ, "REPO": str(Path(__file__).resolve().parent.parent), "WORK": str(tmp_path),
           "FAIL_INDEX": "1", "REPORT": "1" if report_first else "0", "LINGER_S": str(linger_s),
           events.EVENTS_ENV: str(events_path), **(extra or {})}
    env.pop(standby.STANDBY_ENV, None)
    report, said = JobReport(replicas), []
    pool = ReplicaPool([sys.executable, str(script)], env, report, replicas, standbys, max_restarts, str(tmp_path),
                       lambda line: said.append(line) if line else None)
    offset = 0

    def read() -> list[dict]:
        nonlocal offset
        new, offset = events.read_new(str(events_path), offset)
        return new

    try:
        pool.run(read, 0.05)  # (the players end within seconds: the test's timeout names a pool that does not)
    finally:
        pool.close()
    said.append(report.summary())
    return pool, report, said


@pytest.mark.timeout(180)
def test_a_failed_replica_is_replaced_by_a_standby_as_soon_as_its_launcher_reports(tmp_path) -> None:
    pool, report, said = _run_pool(tmp_path, standbys=1, max_restarts=2, report_first=True, linger_s=3.0)
    assert pool.status == 0, said
    served = sorted(p.name for p in tmp_path.glob("served_*"))
    assert len(served) == 1 and served[0].startswith("served_1_"), served  # the standby became replica 1
    assert (tmp_path / served[0]).read_text() == "replica_1"
    # activated on the report, while the failed replica's launcher was still shutting down
    assert os.path.getmtime(tmp_path / served[0]) < float((tmp_path / "failed_1.exit").read_text()), said
    assert said == ["bagua: replica 1 restarted (restart 1 of 2, by a warm standby)",
                    "bagua: fault tolerance: 1 replica failure, 1 restart, 0 heals; 2 of 2 replicas finished"]
    assert json.loads((tmp_path / "standby_1.json").read_text()) == {"retire": True}  # the next one, retired
    assert not pool.spares and not pool.retired


@pytest.mark.timeout(180)
def test_a_replica_that_exits_without_a_report_is_replaced_too(tmp_path) -> None:
    pool, report, said = _run_pool(tmp_path, standbys=1, max_restarts=1, report_first=False)
    assert pool.status == 0, said
    assert said == ["bagua: replica 1 failed: its launcher exited with status 1",
                    "bagua: replica 1 restarted (restart 1 of 1, by a warm standby)",
                    "bagua: fault tolerance: 1 replica failure, 1 restart, 0 heals; 2 of 2 replicas finished"]


@pytest.mark.timeout(180)
def test_without_restarts_left_the_replica_ends_failed_and_the_standby_is_retired(tmp_path) -> None:
    # the standby that replaced replica 1 fails too: the budget (1) is spent, so replica 1 ends failed
    pool, report, said = _run_pool(tmp_path, standbys=1, max_restarts=1, report_first=False,
                                   extra={"STANDBY_EXIT": "3"})
    assert pool.status == 3, said
    assert said == ["bagua: replica 1 failed: its launcher exited with status 1",
                    "bagua: replica 1 restarted (restart 1 of 1, by a warm standby)",
                    "bagua: replica 1 ended with exit status 3 (out of restarts: --max-restarts); the others train on",
                    "bagua: fault tolerance: 2 replica failures, 1 restart, 0 heals; 1 of 2 replicas finished "
                    "(replica 1 ended failed)"]
    assert json.loads((tmp_path / "standby_1.json").read_text()) == {"retire": True}
    assert not pool.spares


def test_drain_does_not_wait_for_an_end_of_file_the_agent_holds_back(tmp_path, capfd) -> None:
    # torchrun's agent keeps the write end of a worker's pipe open after the worker exited: drain must not wait
    # for its end of file (it waited out its whole timeout: 5 s between a kill and the launcher's report)
    path = str(tmp_path / "stdout.fifo")
    os.mkfifo(path)
    pump = worker_logs._Pump(path, 0, "stdout", b"")
    pump.start()
    writer = os.open(path, os.O_WRONLY)  # (what the agent holds)
    try:
        os.write(writer, b"the worker's last line\n")
        worker_logs._pumps.append(pump)
        started = time.monotonic()
        worker_logs.drain(timeout_s=30.0)
        assert not pump.is_alive() and time.monotonic() - started < 10.0
    finally:
        os.close(writer)
        worker_logs._pumps.remove(pump)
    assert "the worker's last line" in capfd.readouterr().out
