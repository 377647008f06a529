"""A rank that hangs on its way out, after its work (in ``destroy_process_group``'s teardown, explicit or at
exit), dumps its threads' stacks and exits with status 1 within ``BAGUA_EXIT_TIMEOUT_S``, and the launcher names
it (bagua_core/runtime/exit_watch.py); so does a launcher that hangs after its workers exited. The script's own
work at exit (a thread it left running) is not cut short. (Every other multi-process test exits in time.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bagua_cli.worker_logs import last_error

SCRIPT = """\
import sys, threading, time
import torch.distributed as dist
import bagua_core as bagua

bagua.init_process_group()
bagua.allreduce_inplace(__import__("torch").ones(1))
hang = sys.argv[1]
if bagua.get_rank() == 1 and hang == "destroy":
    def stuck_in_torch_destroy(*args, **kwargs):
        time.sleep(3600)
    dist.destroy_process_group = stuck_in_torch_destroy
if bagua.get_rank() == 1 and hang == "thread":
    threading.Thread(target=time.sleep, args=(float(sys.argv[2]),), name="left-running").start()  # not a daemon
print(f"rank {bagua.get_rank()} done", flush=True)
if hang == "destroy":
    bagua.destroy_process_group()
"""

TIMEOUT_S = 3


def _run(tmp_path, hang: str, *, timeout_s: int = TIMEOUT_S, thread_s: float = 0) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", BAGUA_EXIT_TIMEOUT_S=str(timeout_s))
    return subprocess.run([sys.executable, "-m", "bagua_cli", "run", "--standalone", "--nproc_per_node=2",
                           str(script), hang, str(thread_s)], capture_output=True, text=True, timeout=90, env=env,
                          cwd=tmp_path)


@pytest.mark.timeout(120, func_only=True)
def test_a_rank_that_hangs_in_destroy_dumps_its_stacks_and_fails(tmp_path) -> None:
    result = _run(tmp_path, "destroy")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "rank 0 done" in result.stdout and "rank 1 done" in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("bagua: workers failed; first failure: rank 1 (exit code 1): did not exit: still "
                           "shutting down after 0:00:03 (BAGUA_EXIT_TIMEOUT_S)"), result.stdout
    assert f"Timeout (0:00:0{TIMEOUT_S})!" in result.stderr
    # the main thread's stack: torch's destroy, below bagua's
    assert "in stuck_in_torch_destroy" in result.stderr and "in destroy_process_group" in result.stderr


@pytest.mark.timeout(120, func_only=True)
def test_the_scripts_own_work_at_exit_is_not_cut_short(tmp_path) -> None:
    """A thread the script left running (15 s, longer than the watch's timeout) finishes: the job exits 0. The
    timeout is 10 s, not 3: what the watch does cover, the interpreter's finalization after the thread, took
    over 3 s on a loaded CI machine (the dump showed the main thread with no Python frame)."""
    result = _run(tmp_path, "thread", timeout_s=10, thread_s=15)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Timeout (" not in result.stderr


LAUNCHER = """\
import atexit, sys, time
def stuck_at_exit():
    time.sleep(3600)
atexit.register(stuck_at_exit)  # registered first: runs after bagua's own exit handlers
from bagua_cli import program
sys.argv = ["bagua", "run", "--standalone", "--nproc_per_node=2", sys.argv[1], "none", "0"]
program()
"""


@pytest.mark.timeout(120, func_only=True)
def test_a_launcher_that_hangs_on_its_way_out_dumps_its_stacks_and_fails(tmp_path) -> None:
    """The workers are done and exited 0; the launcher hangs after them (here in an exit handler): it dumps its
    stacks and exits 1 within the timeout instead of keeping its caller waiting."""
    (tmp_path / "job.py").write_text(SCRIPT)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    env = dict(os.environ, OMP_NUM_THREADS="1", BAGUA_EXIT_TIMEOUT_S=str(TIMEOUT_S))
    result = subprocess.run([sys.executable, str(tmp_path / "launcher.py"), str(tmp_path / "job.py")],
                            capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "rank 0 done" in result.stdout and "rank 1 done" in result.stdout
    assert f"Timeout (0:00:0{TIMEOUT_S})!" in result.stderr and "in stuck_at_exit" in result.stderr, result.stderr


def test_last_error_recognizes_the_dump() -> None:
    stderr = ("Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 'x'\n"
              "Timeout (0:01:00)!\nThread 0x00007f (most recent call first):\n  File \"a.py\", line 9 in f\n")
    error, context = last_error(stderr)
    assert error.startswith("did not exit: still shutting down after 0:01:00 (BAGUA_EXIT_TIMEOUT_S)")
    assert context[0] == "Timeout (0:01:00)!"
    # a traceback after an earlier dump is the error
    assert last_error("Timeout (0:00:05)!\nThread 0x1:\nTraceback (most recent call last):\n  x\nValueError: v\n")[0] \
        == "ValueError: v"


def test_the_timeout_is_checked(monkeypatch) -> None:
    from bagua_core.runtime import env

    monkeypatch.setenv("BAGUA_EXIT_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="BAGUA_EXIT_TIMEOUT_S must be a number"):
        env.get_exit_timeout_s()
    monkeypatch.setenv("BAGUA_EXIT_TIMEOUT_S", "0")
    assert env.get_exit_timeout_s() == 0
    monkeypatch.delenv("BAGUA_EXIT_TIMEOUT_S")
    assert env.get_exit_timeout_s() == 60
