"""Mixed precision with every algorithm on the CPU: ``torch.autocast("cpu", bfloat16)`` and
``torch.amp.GradScaler("cpu")`` on two ranks (``tests/algorithm_matrix.py``); the CUDA version (fp16)
is in ``test_gpu_algorithms.py``. Every rank ends with finite weights and the same loss scale."""

from __future__ import annotations

import pytest
import torch

from tests.algorithm_matrix import cases_for, check_amp_results, train_all_amp
from tests.distributed import run_workers


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return run_workers(train_all_amp, 2, "cpu", timeout=300)


@pytest.mark.xdist_group("amp")  # the cases of one module-scoped job share a worker, so it runs once
@pytest.mark.parametrize("case", cases_for(2))
def test_autocast_and_grad_scaler_on_cpu(case: str, results: list[dict]) -> None:
    check_amp_results(case, results)
    for result in results:
        losses = result[case]["losses"]
        assert losses[-1] < losses[0] + 0.5, (case, losses)


def _dp_overflow(rank: int) -> dict:
    from bagua_algorithms.decentralized_dp.algorithm import DecentralizedDPAlgorithm

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    model = model.with_bagua([optimizer], DecentralizedDPAlgorithm(topology="complete", scaler=scaler))
    scales = []
    for step in range(4):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(10 * step + rank))
        loss = model(x).square().mean()
        if rank == 1 and step == 2:
            loss = loss * float("inf")  # an overflow on this rank only
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
        assert all(torch.isfinite(p).all() for p in model.parameters()), (rank, step)  # the inf step skipped
    model.bagua_algorithm.global_avg(model)
    weights = [p.detach().clone() for p in model.parameters()]
    model.bagua_shutdown()
    return {"scales": scales, "finite": all(torch.isfinite(w).all() for w in weights)}


def test_decentralized_dp_takes_the_grad_scaler() -> None:
    results = run_workers(_dp_overflow, 2)
    assert all(r["finite"] for r in results)
    assert results[0]["scales"] == [1024.0] * 4  # no overflow here
    assert results[1]["scales"][:2] == [1024.0, 1024.0] and results[1]["scales"][2] == 512.0  # skipped, halved
