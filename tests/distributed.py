"""Run a test function on several local worker processes over gloo, with a timeout that names the rank
that hung.

    results = run_workers(check_fn, world_size=3)           # check_fn(rank, *args) -> picklable
    results = run_workers(check_fn, 4, local_size=2)         # 2 emulated nodes of 2 ranks

Each worker gets the torchrun variables, one thread, its node from ``local_size``
(``GROUP_RANK = rank // local_size``), runs ``bagua_core.init_process_group()`` and then ``fn``.
The test function must live at module level in a test module (workers import it).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import pickle
import queue
import socket
import time
import traceback
from typing import Any
from collections.abc import Callable

__all__ = ["run_workers", "run_workers_outcomes", "free_port", "FORKSERVER", "WorkerFailure", "WorkerOutcome"]

_CONTEXT = mp.get_context("forkserver")
# One server per pytest worker forks every worker and fault-tolerant replica (tests/fault_tolerant_job.py) with
# these already imported: about 2.5 s of CPU saved per process. torch._dynamo is imported by the first optimizer
# a worker creates; torchft (the [ft] extra) is skipped where it is not installed.
_CONTEXT.set_forkserver_preload(["torch", "torch.distributed", "torch._dynamo", "torch.optim", "bagua_core",
                                 "torchft", "tests.fault_tolerant_replica"])
FORKSERVER = _CONTEXT


class WorkerFailure(AssertionError):
    pass


PORTS_PER_WORKER = 800
FIRST_PORT = 10_000
"""Ports are handed out below Linux's ephemeral range (32768 and up), so a port this process picked is never
one the kernel gives another socket in the meantime; each pytest-xdist worker (``gwN``) draws from its own
range of ``PORTS_PER_WORKER``, so two workers never pick the same port for two jobs started at once."""
_next_port = [0]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, from this pytest worker's own range (one in turn, skipping
    ports in use), for a job's MASTER_PORT, a rendezvous endpoint or a server the test starts."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    first = FIRST_PORT + (index % ((32768 - FIRST_PORT) // PORTS_PER_WORKER)) * PORTS_PER_WORKER
    for _ in range(PORTS_PER_WORKER):
        port = first + (os.getpid() + _next_port[0]) % PORTS_PER_WORKER
        _next_port[0] += 1
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}..{first + PORTS_PER_WORKER - 1} (pytest worker {worker})")


def _worker(rank: int, world_size: int, local_size: int, port: int, timeout: float, extra_env: dict,
            rank_env: dict, fn: Callable, args: tuple, results: Any) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank % local_size),
        LOCAL_WORLD_SIZE=str(local_size),
        GROUP_RANK=str(rank // local_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        BAGUA_COMM_TIMEOUT_S=str(int(timeout)),
        OMP_NUM_THREADS="1",
    )
    os.environ.update(extra_env)
    os.environ.update(rank_env.get(rank, {}))
    try:
        import torch

        torch.set_num_threads(1)
        import bagua_core

        bagua_core.init_process_group()
        try:
            value = fn(rank, *args)
        except BaseException as exc:  # reported to the job as `bagua run`'s uncaught-exception hook does
            from bagua_core.runtime.failure import translate

            translate(exc, "an uncaught exception in the main thread")
            raise
        finally:
            bagua_core.destroy_process_group()
        results.put((rank, "ok", pickle.dumps(value)))  # plain pickle: no shared-memory handles
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))


@dataclasses.dataclass
class WorkerOutcome:
    """How one worker ended: ``ok`` (``value`` is what ``fn`` returned), ``error`` (``value`` is the
    traceback), ``exited`` (killed or exited without a result: ``exitcode``) or ``hung`` (killed by
    the harness after ``timeout``)."""

    status: str
    value: Any = None
    exitcode: int | None = None


def run_workers(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    local_size: int | None = None,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    rank_env: dict[int, dict[str, str]] | None = None,
) -> list[Any]:
    """Run ``fn(rank, *args)`` on ``world_size`` processes; return the results ordered by rank.
    ``env`` is added to every worker's environment, ``rank_env[r]`` to rank r's only."""
    outcomes = run_workers_outcomes(fn, world_size, *args, local_size=local_size, timeout=timeout, env=env,
                                    rank_env=rank_env)
    errors = [f"--- rank {r} failed:\n{o.value}" for r, o in enumerate(outcomes) if o.status in ("error", "exited")]
    hung = [r for r, o in enumerate(outcomes) if o.status == "hung"]
    if errors or hung:
        message = "\n".join(errors)
        if hung:
            message += f"\nranks {hung} hung: no result within {timeout:.0f} s (killed)"
        raise WorkerFailure(message)
    return [o.value for o in outcomes]


def run_workers_outcomes(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    local_size: int | None = None,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    rank_env: dict[int, dict[str, str]] | None = None,
) -> list[WorkerOutcome]:
    """Like :func:`run_workers`, but return how every worker ended instead of raising (for tests of
    failures: a killed worker, an error, a hang)."""
    local_size = local_size or world_size
    results = _CONTEXT.Queue()
    port = free_port()
    procs = [
        _CONTEXT.Process(
            target=_worker,
            args=(rank, world_size, local_size, port, timeout, env or {}, rank_env or {}, fn, args, results),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout
    outcome: dict[int, tuple[str, Any]] = {}
    try:
        while len(outcome) < world_size:
            if any(status in ("error", "exited") for status, _ in outcome.values()):
                deadline = min(deadline, time.monotonic() + 10.0)  # the others may be stuck waiting for it
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:  # a short wait: a worker that died without a result is reported as it dies, not at the timeout
                rank, status, value = results.get(timeout=min(remaining, 1.0))
                outcome[rank] = (status, value)
            except queue.Empty:
                pass
            for rank, proc in enumerate(procs):
                if rank not in outcome and not proc.is_alive() and proc.exitcode not in (None, 0):
                    outcome[rank] = ("exited", f"worker exited with code {proc.exitcode}")
    finally:
        for proc in procs:
            proc.join(timeout=0.5 if len(outcome) < world_size else 10)
            if proc.is_alive():
                proc.kill()
                proc.join()
    results = []
    for rank, proc in enumerate(procs):
        status, value = outcome.get(rank, ("hung", None))
        results.append(WorkerOutcome(status, pickle.loads(value) if status == "ok" else value, proc.exitcode))
    return results
