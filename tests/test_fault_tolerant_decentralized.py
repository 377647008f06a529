"""The decentralized family at a quorum size the two-replica fault matrix does not reach: three replicas (an
odd quorum: shift_one leaves one replica without a partner each round, the ring topology of decentralized_dp
has an end without a link, the low-precision ring has two distinct neighbours), then two once one is killed,
which re-derives the pairs, the ring and the topology from the smaller quorum; and replicas of two ranks (a
replica is a node of the hierarchy), one rank killed and the replica restarted. Slow (three replicas, or four
processes)."""

from __future__ import annotations

import json
import signal

import pytest

from tests.fault_tolerant_job import Job
from tests.test_fault_tolerant_matrix import ALGORITHMS, GAP_S, START_S, _check_healthy

CASES = ["decentralized_shift_one", "low_precision_decentralized", "decentralized_dp_ring"]


@pytest.mark.slow
@pytest.mark.timeout(400, func_only=True)
@pytest.mark.parametrize("algorithm", CASES)
def test_three_replicas_then_two(job: Job, algorithm: str) -> None:
    spec = json.dumps(ALGORITHMS[algorithm][0])
    for name in ("a", "b", "c"):
        job.start(name, "--algorithm", spec)
    for name in ("a", "b", "c"):
        job.wait_for("committed 3 steps in a quorum of three", lambda n=name: len(job.committed(n, quorum=3)) >= 3,
                     START_S, name)
    ranks = {r["rank"] for name in ("a", "b", "c") for r in job.committed(name, quorum=3)}
    assert ranks == {0, 1, 2}, ranks
    job.procs["c"].send_signal(signal.SIGKILL)
    assert job.wait_exit("c", GAP_S) == -9, job.output("c")[-3000:]
    before = {name: len(job.committed(name, quorum=2)) for name in ("a", "b")}
    for name in ("a", "b"):
        job.wait_for("committed 3 steps in a quorum of two after c was killed",
                     lambda n=name: len(job.committed(n, quorum=2)) >= before[n] + 3, GAP_S * 3, name)
    job.stop()
    for name in ("a", "b"):
        assert job.wait_exit(name, GAP_S) == 0, job.output(name)[-2000:]
        _check_healthy(job, name)


def _pids(job: Job, name: str) -> list[int]:
    return list(dict.fromkeys(r["pid"] for r in job.records(name)))


@pytest.mark.slow
@pytest.mark.timeout(500, func_only=True)
@pytest.mark.parametrize("algorithm", CASES)
def test_replicas_of_two_ranks_kill_and_restart(job: Job, algorithm: str) -> None:
    """Replicas of two ranks (a replica is a node: hierarchical shift_one and low-precision ring among the
    replicas, decentralized_dp's ring over the four ranks): one of b's ranks is killed, b's other rank stops,
    a trains on alone; b restarted heals rank by rank and trains with a again."""
    spec = json.dumps(ALGORITHMS[algorithm][0])
    job.start("a", "--algorithm", spec, ranks=2)
    job.start("b", "--algorithm", spec, "--die-at", "4", "--only-rank", "1", ranks=2)
    assert job.wait_exit("b.1", START_S) == -9, job.output("b.1")[-3000:]
    assert job.wait_exit("b.0", GAP_S * 2) != 0, "b's other rank went on without its replica"
    job.wait_for("committed 3 steps without b", lambda: len(job.committed("a.0", quorum=1)) >= 3, GAP_S * 3, "a.0")
    first = _pids(job, "b.0") + _pids(job, "b.1")
    job.start("b", "--algorithm", spec, ranks=2)
    for rank in ("b.0", "b.1"):
        restarted = lambda rank=rank: [p for p in _pids(job, rank) if p not in first]  # noqa: E731
        job.wait_for("trained 3 steps after the restart",
                     lambda: bool(restarted()) and len(job.committed(rank, pid=restarted()[0], quorum=2)) >= 3,
                     START_S, rank)
        assert job.committed(rank, pid=restarted()[0])[0]["healed"] == 1
    job.stop()
    for rank in ("a.0", "a.1", "b.0", "b.1"):
        assert job.wait_exit(rank, GAP_S) == 0, job.output(rank)[-2000:]
    _check_healthy(job, "a.0")
    _check_healthy(job, "a.1")
