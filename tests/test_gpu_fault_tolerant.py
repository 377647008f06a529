"""Fault-tolerant mode on one GPU: two one-rank replicas train a CUDA model (inside each replica the fixed
group is ``cpu:gloo,cuda:nccl``; between replicas torchft's gloo group carries the CUDA tensors), one is
killed mid-step and restarted, heals from the live replica and trains on bit-identical with it."""

from __future__ import annotations

import pytest
import torch

from tests.fault_tolerant_job import Job
from tests.test_fault_tolerant_matrix import START_S, GAP_S, _check_healthy, _check_identical, _pids

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


@pytest.mark.timeout(300, func_only=True)
@pytest.mark.parametrize("algorithm", ['{"name": "gradient_allreduce"}', '{"name": "bytegrad"}'])
def test_cuda_replica_killed_restarted_heals(tmp_path, algorithm: str) -> None:
    job = Job(tmp_path)
    try:
        job.start("a", "--algorithm", algorithm, "--device", "cuda")
        job.start("b", "--algorithm", algorithm, "--device", "cuda", "--die-at", "4")
        assert job.wait_exit("b", START_S) == -9, job.output("b")[-3000:]
        job.wait_for("committed alone after b was killed", lambda: len(job.committed("a", quorum=1)) >= 1, GAP_S * 2, "a")
        first = _pids(job.records("b"))
        job.start("b", "--algorithm", algorithm, "--device", "cuda")
        restarted = lambda: [p for p in _pids(job.records("b")) if p not in first]  # noqa: E731
        job.wait_for("trained 3 steps after its restart",
                     lambda: bool(restarted()) and len(job.committed("b", pid=restarted()[0], quorum=2)) >= 3, START_S, "b")
        job.stop()
        assert job.wait_exit("a", GAP_S) == 0, job.output("a")[-2000:]
        assert job.wait_exit("b", GAP_S) == 0, job.output("b")[-2000:]
        _check_healthy(job, "a")
        again = job.committed("b", pid=restarted()[0])
        assert again[0]["healed"] == 1, f"the restarted replica did not heal: {again[:2]}"
        _check_identical(job, "a", "b", pid=restarted()[0])
    finally:
        job.close()
