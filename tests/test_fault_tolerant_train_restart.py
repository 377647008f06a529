"""``bagua train --fault-tolerant --replicas 2 --max-restarts 1`` under one kill, as a user runs it: the
worker of replica 1 is killed (SIGKILL, found as a user would, by its replica in its environment), its
replica is restarted, and the job exits 0 with a line for the failure, the restart and the heal and a
summary that counts them. Killed mid-training, the restarted replica heals from the live one and ends
with the same weights; killed before the first step, the failure and the restart are still counted, and
nothing is healed (no step had committed).

``--min-replicas 2``: no step commits with one replica, so the kill lands while both train together
(after the progress bar passed ``KILL_AFTER_STEPS``) and the restarted replica is behind by those steps. (Both
replicas start at step 0 with the first one's weights, torchft's initial sync: not a heal, not counted.)"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.process_tree import JobOutput, children, cmdline, environ

pytest.importorskip("torchft")

KILL_AFTER_STEPS = 20
START_S = 300.0
"""How long the job may take to start its workers (this machine is loaded)."""
END_S = 600.0
"""How long it may take, after the kill, to restart the replica and train the rest of its epochs."""


def _worker_of_replica(root: int, replica: str) -> int | None:
    for pid in children(root):
        args = cmdline(pid)
        if "-u" in args and "bagua_examples.train_digits" in args and environ(pid).get("BAGUA_FT_REPLICA_INDEX") == replica:
            return pid
    return None


def _wait(what: str, condition, timeout_s: float, proc: subprocess.Popen, output: JobOutput):
    deadline = time.monotonic() + timeout_s
    while (found := condition()) in (None, False):
        if proc.poll() is not None:
            raise AssertionError(f"the job exited ({proc.returncode}) before {what}:\n{output.text[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the job hung: not {what} within {timeout_s:g} s:\n{output.text[-3000:]}")
        time.sleep(0.1)
    return found


KILL = ("--min-replicas", "2", "--max-restarts", "1", "--ft-join-timeout-ms", "1500")


def _run_with_one_kill(tmp_path: Path, mid_training: bool, epochs: int, more: tuple[str, ...] = (),
                       fault=lambda pid: os.kill(pid, signal.SIGKILL),
                       options: tuple[str, ...] = KILL,
                       ready: tuple[str, Any] | None = None,
                       together: bool = False) -> tuple[int, list[str], list[dict]]:
    """Run the job, apply ``fault`` to replica 1's worker (a SIGKILL unless told) once ``ready`` (what, and a
    condition on the job's pid) holds and, with ``together``, once the progress bar shows a quorum of both replicas
    (with ``--min-replicas 1`` a replica that starts late under load joins later), wait for the job's end."""
    summary = tmp_path / "summary_{replica}.json"
    command = [sys.executable, "-m", "bagua_cli", "train", "--fault-tolerant", "--replicas", "2", *options,
               "--epochs", str(epochs), "--algorithm", "gradient_allreduce", "--summary-json", str(summary), *more]
    env = {k: v for k, v in os.environ.items() if k not in ("RUST_LOG", "BAGUA_VERBOSE")}
    # the survivor waits for the restarted replica (--min-replicas 2): give a loaded machine time to restart it
    # and draw the progress bar into the pipe (BAGUA_PROGRESS=bar; a pipe gets a few lines otherwise): the test
    # counts the steps on it to kill mid-training
    env.update(OMP_NUM_THREADS="1", BAGUA_FT_QUORUM_TIMEOUT_S="400", BAGUA_PROGRESS="bar")
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    output = JobOutput(proc)
    try:
        worker = _wait("replica 1's worker started", lambda: _worker_of_replica(proc.pid, "1"), START_S, proc, output)
        if mid_training:
            _wait(f"{KILL_AFTER_STEPS} steps trained", lambda: output.steps() >= KILL_AFTER_STEPS, START_S, proc, output)
        if ready is not None:
            _wait(ready[0], lambda: ready[1](proc.pid), START_S, proc, output)
        if together:
            _wait("a quorum of both replicas", lambda: re.findall(r"replicas=(\d+)", output.text)[-1:] == ["2"],
                  START_S, proc, output)
        fault(worker)
        try:
            proc.wait(timeout=END_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job hung past {END_S:g} s after the kill:\n{output.text[-3000:]}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output.thread.join(10)
    lines = output.text.replace("\r", "\n").splitlines()
    results = [json.loads((tmp_path / f"summary_{k}.json").read_text()) for k in (0, 1)
               if (tmp_path / f"summary_{k}.json").exists()]
    return proc.returncode, lines, results


@pytest.mark.slow
@pytest.mark.timeout(1000, func_only=True)
def test_a_kill_mid_training_is_counted_restarted_and_healed(tmp_path: Path) -> None:
    board = tmp_path / "board"
    more = ("--tensorboard", str(board)) if importlib.util.find_spec("tensorboard") is not None else ()
    status, lines, results = _run_with_one_kill(tmp_path, mid_training=True, epochs=100, more=more)
    text = "\n".join(lines[-40:])
    assert status == 0, text
    # the launcher's lines (one may follow a progress bar's last update on its line)
    ours = [line[line.index("bagua: replica 1 "):] for line in lines if "bagua: replica 1 " in line]
    assert [line.split()[3] for line in ours] == ["failed:", "restarted", "healed"], text
    assert "without recording an error (killed by a signal" in ours[0], text
    assert ours[1] == "bagua: replica 1 restarted (restart 1 of 1)", text
    assert int(re.match(r"bagua: replica 1 healed from a live peer at step (\d+) ", ours[2]).group(1)) >= \
        KILL_AFTER_STEPS, text
    assert lines[-1] == "bagua: fault tolerance: 1 replica failure, 1 restart, 1 heal; 2 of 2 replicas finished", text
    assert len(results) == 2, text
    if more:  # the metrics a user watches: the stall the kill cost the survivor, the time the restarted one healed in
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        survivor, restarted = (EventAccumulator(str(board / f"replica_{k}")) for k in (0, 1))
        survivor.Reload()
        restarted.Reload()
        stalls = [tag for tag in survivor.Tags()["scalars"] if tag.startswith("ft/stall_s/")]
        # (min-replicas 2: no quorum forms alone, so the survivor never sees fewer replicas; it waits in its next
        # quorum, which the restarted replica joins: a new quorum of as many; or a step of its fails first)
        assert len(stalls) == 1 and stalls[0] in ("ft/stall_s/quorum_changed", "ft/stall_s/step_failed"), stalls
        stall = survivor.Scalars(stalls[0])
        assert len(stall) == 1 and stall[0].value > 0.5, stall  # the restart's seconds, at least
        heal = restarted.Scalars("ft/heal_s")
        assert len(heal) == 1 and 0 < heal[0].value < stall[0].value, (heal, stall)
        assert "ft/heal_s" not in survivor.Tags()["scalars"]
    assert results[0]["test_accuracy"] == results[1]["test_accuracy"], results  # healed: the same weights
    assert results[1]["fault_tolerance"]["healed"] == 1, results[1]


@pytest.mark.slow
@pytest.mark.timeout(1000, func_only=True)
def test_a_kill_before_the_first_step_is_counted(tmp_path: Path) -> None:
    # (nothing trains before the kill: a few epochs after it show the restart is counted and the job ends)
    status, lines, results = _run_with_one_kill(tmp_path, mid_training=False, epochs=5)
    text = "\n".join(lines[-40:])
    assert status == 0, text
    assert lines[-1] == "bagua: fault tolerance: 1 replica failure, 1 restart, 0 heals; 2 of 2 replicas finished", text
    assert [line for line in lines if "bagua: replica 1 failed: " in line], text
    assert [line for line in lines if "bagua: replica 1 restarted (restart 1 of 1)" in line], text


def _standby_worker(root: int) -> int | None:
    for pid in children(root):
        args = cmdline(pid)
        if "-u" in args and "bagua_examples.train_digits" in args and environ(pid).get("BAGUA_FT_STANDBY"):
            return pid
    return None


@pytest.mark.slow
@pytest.mark.timeout(1000, func_only=True)
def test_a_kill_is_replaced_by_a_warm_standby_that_heals(tmp_path: Path) -> None:
    # --standby 1: a third process waits, built and wrapped, before its first step; replica 1's worker killed
    # mid-training, the standby takes its place (its id and index) and heals from the live replica; another standby
    # starts, and is retired when the job ends
    status, lines, results = _run_with_one_kill(
        tmp_path, mid_training=True, epochs=100, options=(*KILL, "--standby", "1"),
        ready=("the standby's worker started", _standby_worker))
    text = "\n".join(lines[-40:])
    assert status == 0, text
    ours = [line[line.index("bagua: replica 1 "):] for line in lines if "bagua: replica 1 " in line]
    assert [line.split()[3] for line in ours] == ["failed:", "restarted", "healed"], text
    assert ours[1] == "bagua: replica 1 restarted (restart 1 of 1, by a warm standby)", text
    assert int(re.match(r"bagua: replica 1 healed from a live peer at step (\d+) ", ours[2]).group(1)) >= \
        KILL_AFTER_STEPS, text
    assert lines[-1] == "bagua: fault tolerance: 1 replica failure, 1 restart, 1 heal; 2 of 2 replicas finished", text
    assert not [line for line in lines if "standby exited" in line], text  # the second one was retired: status 0
    assert len(results) == 2, text
    assert results[0]["fault_tolerance"]["standby"] is False and results[1]["fault_tolerance"]["standby"] is True
    assert results[1]["fault_tolerance"]["healed"] == 1, results[1]
    assert results[0]["test_accuracy"] == results[1]["test_accuracy"], results  # healed: the same weights


STOP_S = 12.0
"""How long the stopped replica stays stopped: well past ``--ft-timeout`` (2 s) and the lighthouse's heartbeat
timeout (5 s), and well short of the time the survivor takes to train the epochs left alone."""


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    threading.Timer(STOP_S, os.kill, (pid, signal.SIGCONT)).start()


@pytest.mark.slow
@pytest.mark.timeout(1000, func_only=True)
def test_a_hung_replica_costs_the_timeout_not_its_hang_and_heals(tmp_path: Path) -> None:
    # replica 1's worker stopped (SIGSTOP) for 12 s mid-training, then continued: the survivor goes on alone
    # (min-replicas 1) once its collective failed (--ft-timeout 2) and the lighthouse has dropped the silent
    # replica (--ft-heartbeat-timeout-ms), and the stopped one, back, rejoins and heals to the same weights
    status, lines, results = _run_with_one_kill(
        tmp_path, mid_training=True, epochs=400, fault=_stop,
        options=("--min-replicas", "1", "--ft-timeout", "2"), together=True)
    text = "\n".join(lines[-40:])
    assert status == 0, text
    # (with min-replicas 1 the replica that starts first trains alone until the other joins and heals: on a loaded
    # machine that is one more heal, at start)
    assert re.fullmatch(r"bagua: fault tolerance: 0 replica failures, 0 restarts, [12] heals?; 2 of 2 replicas "
                        r"finished", lines[-1]), text
    assert len(results) == 2, text
    survivor, stopped = (r["fault_tolerance"] for r in results)
    stalls = [f for f in survivor["faults"] if "stall_s" in f]
    # one loss, the rest new quorums of more replicas (a late start's join, the stopped one's return; that is not
    # recorded when it came back for the survivor's last step, with no commit after it to end that stall). The
    # loss costs the survivor --ft-timeout, and until the lighthouse has dropped the silent replica (its heartbeat
    # timeout, 5 s: a quorum of one of two live replicas is refused): well short of the hang
    losses = [f for f in stalls if f["kind"] == "replica_lost"]
    assert len(losses) == 1 and 0.4 <= losses[0]["stall_s"] < STOP_S - 3, survivor["faults"]
    assert all(f["kind"] == "quorum_changed" for f in stalls if f is not losses[0]), survivor["faults"]
    assert survivor["replicas_lost"] == 1, survivor
    # back, it healed from the survivor, which had trained on: the step it was in failed and was never committed,
    # or (stopped after its exchange, before its commit) it commits that step, the quorum's as well, and heals at
    # its next quorum
    after_loss = [f for f in stopped["faults"] if f["step"] >= losses[0]["step"]]
    assert [f["kind"] for f in after_loss].count("healed") == 1, stopped
    assert results[0]["test_accuracy"] == results[1]["test_accuracy"], results  # healed: the same weights
