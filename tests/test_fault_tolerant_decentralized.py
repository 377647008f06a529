"""The decentralized family at a quorum size the two-replica fault matrix does not reach: three replicas (an
odd quorum: shift_one leaves one replica without a partner each round, the ring topology of decentralized_dp
has an end without a link, the low-precision ring has two distinct neighbours), then two once one is killed,
which re-derives the pairs, the ring and the topology from the smaller quorum. Slow (three replicas)."""

from __future__ import annotations

import json
import signal

import pytest

from tests.fault_tolerant_job import Job
from tests.test_fault_tolerant_matrix import ALGORITHMS, GAP_S, START_S, _check_healthy

CASES = ["decentralized_shift_one", "low_precision_decentralized", "decentralized_dp_ring"]


@pytest.fixture
def job(tmp_path):
    job = Job(tmp_path)
    try:
        yield job
    finally:
        job.close()


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
    assert job.wait_exit("c", GAP_S) == -9
    before = {name: len(job.committed(name, quorum=2)) for name in ("a", "b")}
    for name in ("a", "b"):
        job.wait_for("committed 3 steps in a quorum of two after c was killed",
                     lambda n=name: len(job.committed(n, quorum=2)) >= before[n] + 3, GAP_S * 3, name)
    job.stop()
    for name in ("a", "b"):
        assert job.wait_exit(name, GAP_S) == 0, job.output(name)[-2000:]
        _check_healthy(job, name)
