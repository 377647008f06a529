"""A replica whose collective between replicas failed lets go of its gloo group at once, so that a surviving
peer still waiting for its message (which it will never send: it left the exchange when it saw the dead
peer) fails at once instead of after the whole timeout. Three processes with a ``ManagedGroup`` each over
plain gloo: rank 2 dies, rank 1 sees it in a receive and stays alive, rank 0 waits on a receive from rank 1.
Before the release, rank 0 waited the timeout (the 3-replica benchmark's survivors stalled 10 s per kill)."""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from datetime import timedelta

from tests.distributed import free_port

TIMEOUT_S = 8.0
"""The gloo timeout of the managed group: rank 0 must learn far sooner."""


def _managed_group(rank: int, port: int, world_size: int):  # noqa: ANN202
    """``(store, managed, errors)``: a default gloo group and a ``ManagedGroup`` over a second one (gloo
    timeout TIMEOUT_S), its errors collected in ``errors``."""
    import torch.distributed as dist

    from bagua_features.fault_tolerance.managed_group import ManagedGroup

    store = dist.TCPStore("127.0.0.1", port, world_size, rank == 0, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=dist.PrefixStore("default", store), rank=rank, world_size=world_size)
    errors: list[Exception] = []
    inner = dist.ProcessGroupGloo(dist.PrefixStore("managed", store), rank, world_size, timedelta(seconds=TIMEOUT_S))
    return store, ManagedGroup(inner, rank, world_size, "test", errors.append), errors


def _worker(rank: int, port: int, out: multiprocessing.Queue) -> None:
    import torch
    import torch.distributed as dist

    store, managed, errors = _managed_group(rank, port, 3)
    tensor = torch.ones(4)
    managed.allreduce([tensor], dist.AllreduceOptions()).wait()  # every connection is up
    assert not errors and tensor.tolist() == [3.0] * 4, (errors, tensor)
    store.set(f"ready{rank}", "1")
    store.wait(["ready0", "ready1", "ready2"])
    if rank == 2:
        time.sleep(0.5)  # the others post their receives first
        os._exit(0)
    started = time.monotonic()
    if rank == 1:
        managed.recv([tensor], 2, 0).wait()  # fails: rank 2 is gone; rank 1 leaves the exchange
        out.put((1, time.monotonic() - started, [str(e)[:200] for e in errors]))
        time.sleep(TIMEOUT_S + 2)  # alive: only the released group can tell rank 0
    else:
        managed.recv([tensor], 1, 0).wait()  # rank 1 never sends
        out.put((0, time.monotonic() - started, [str(e)[:200] for e in errors]))


def test_a_failed_replica_releases_its_group_so_waiting_peers_fail_at_once() -> None:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    port = free_port()
    procs = [context.Process(target=_worker, args=(rank, port, out), daemon=True) for rank in range(3)]
    for proc in procs:
        proc.start()
    results = {}
    try:
        deadline = time.monotonic() + 120
        while len(results) < 2:
            try:
                rank, elapsed, errors = out.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                missing = sorted({0, 1} - set(results))
                raise AssertionError(f"rank(s) {missing} hung: no result within 120 s") from None
            results[rank] = (elapsed, errors)
    finally:
        for proc in procs:
            proc.kill()
            proc.join()
    elapsed, errors = results[1]
    assert errors, "rank 1's receive from the dead rank 2 did not fail"
    elapsed, errors = results[0]
    assert errors and "closed" in errors[0].lower(), errors
    assert elapsed < TIMEOUT_S / 2, f"rank 0 waited {elapsed:.1f} s for rank 1, which had left the exchange"


def test_an_earlier_quorums_group_error_leaves_the_current_quorum_alone() -> None:
    """The runtime's error handler, alone: an error of a group of the current quorum fails the step and
    releases the quorum's groups; one of an earlier quorum's group (an abandoned operation finishing late)
    must not (it would fail a healthy step and drop its connections)."""
    from types import SimpleNamespace

    from bagua_features.fault_tolerance.runtime import FaultTolerantRuntime

    reported, aborted, released = [], [], []
    runtime = FaultTolerantRuntime.__new__(FaultTolerantRuntime)
    runtime.options = SimpleNamespace(replica_id="r0")
    runtime.manager = SimpleNamespace(report_error=reported.append)
    runtime.ft_group = SimpleNamespace(abort=lambda errored: aborted.append(errored))
    runtime.group = SimpleNamespace(managed_groups=[SimpleNamespace(release=lambda: released.append(1))])
    runtime._generation = 2

    runtime._on_group_error(1, RuntimeError("late error of quorum 1"))
    assert (reported, released, aborted) == ([], [], [])
    error = RuntimeError("connection closed")
    runtime._on_group_error(2, error)
    assert reported == [error] and released == [1] and aborted == [False]


def _future_worker(rank: int, port: int, out: multiprocessing.Queue) -> None:
    try:
        _future_steps(rank, port, out)
    except BaseException as exc:  # said, not left to the parent's timeout
        out.put((rank, "failed", repr(exc), None, None))
        raise


def _future_steps(rank: int, port: int, out: multiprocessing.Queue) -> None:
    import torch
    import torch.distributed as dist

    store, managed, errors = _managed_group(rank, port, 2)
    tensor = torch.full((4,), float(rank + 1))
    if rank == 1:
        time.sleep(1.0)  # rank 0's allreduce cannot complete before rank 1 joins it
    future = managed.allreduce([tensor], dist.AllreduceOptions()).get_future()
    done_at_once = future.done()
    value = future.wait()
    out.put((rank, done_at_once, [v.tolist() for v in value], tensor.tolist(), [str(e) for e in errors]))
    store.set(f"done{rank}", "1")
    store.wait(["done0", "done1"])


def test_an_operations_future_completes_with_the_operation() -> None:
    """``work.get_future()`` of an operation on the managed group completes when the operation does, with
    its result (it completed at once, with nothing, so a caller chaining on it read the buffers early)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    port = free_port()
    procs = [context.Process(target=_future_worker, args=(rank, port, out), daemon=True) for rank in range(2)]
    for proc in procs:
        proc.start()
    results = {}
    try:
        deadline = time.monotonic() + 120
        while len(results) < 2:
            try:
                rank, *result = out.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                missing = sorted({0, 1} - set(results))
                raise AssertionError(f"rank(s) {missing} hung: no result within 120 s") from None
            results[rank] = result
            assert result[0] != "failed", f"rank {rank}: {result[1]}"
    finally:
        for proc in procs:
            proc.join(timeout=10)
            proc.kill()
    done_at_once, value, tensor, errors = results[0]
    assert not done_at_once, "rank 0's future was complete before rank 1 had joined the allreduce"
    assert value == [[3.0] * 4] and tensor == [3.0] * 4 and not errors, results[0]
    assert results[1][1:] == [[[3.0] * 4], [3.0] * 4, []], results[1]
