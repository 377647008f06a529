"""Every algorithm on CUDA tensors against its CPU result (``tests/algorithm_matrix.py``): two ranks
sharing one GPU over gloo (NCCL allows one rank per device), one rank over NCCL, one rank over bagua's
native NCCL communicator; bit-identical where the algorithm promises exactness. Mixed precision
(autocast + GradScaler) with every algorithm on CUDA."""

from __future__ import annotations

import pytest
import torch

from tests.algorithm_matrix import ALGORITHMS, cases_for, check_amp_results, train_all, train_all_amp
from tests.distributed import run_workers

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
              pytest.mark.xdist_group("gpu_algorithms")]  # one module-scoped job for all: one worker

GLOO = {"BAGUA_BACKEND": "gloo"}
NATIVE = {"BAGUA_COMMUNICATOR": "nccl"}
SAME_WEIGHTS_ON_EVERY_RANK = {"gradient_allreduce", "gradient_allreduce_hierarchical", "bytegrad"}


@pytest.fixture(scope="module")
def runs() -> dict:
    """Each configuration once (a worker launch each), shared by the per-algorithm tests."""
    cache: dict = {}

    def get(key: str) -> list:
        if key not in cache:
            fn, world, device, env = {
                "cpu2": (train_all, 2, "cpu", None),
                "cuda2_gloo": (train_all, 2, "cuda", GLOO),
                "cpu1": (train_all, 1, "cpu", None),
                "cuda1_nccl": (train_all, 1, "cuda", None),
                "cuda1_native": (train_all, 1, "cuda", NATIVE),
                "amp_cuda2_gloo": (train_all_amp, 2, "cuda", GLOO),
                "amp_cuda1_nccl": (train_all_amp, 1, "cuda", None),
            }[key]
            cache[key] = run_workers(fn, world, device, env=env, timeout=300)
        return cache[key]

    return get


def _weights(result: dict, case: str) -> list[torch.Tensor]:
    value = result[case]
    if isinstance(value, str):
        pytest.fail(f"{case} failed:\n{value}")
    return value


def _compare(case: str, on_cpu: list[dict], on_cuda: list[dict]) -> None:
    promise = ALGORITHMS[case][1]
    for rank, (cpu, cuda) in enumerate(zip(on_cpu, on_cuda)):
        assert cuda["device"].startswith("cuda"), cuda["device"]
        expected, got = _weights(cpu, case), _weights(cuda, case)
        for i, (e, g) in enumerate(zip(expected, got)):
            assert torch.isfinite(g).all(), f"{case} rank {rank} weight {i}: not finite on CUDA"
            if promise == "exact":
                assert torch.equal(e, g), f"{case} rank {rank} weight {i}: max diff {(e - g).abs().max()}"
            elif promise == "close":
                torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, msg=lambda m, rank=rank: f"{case} rank {rank}: {m}")
    if case in SAME_WEIGHTS_ON_EVERY_RANK:
        for rank, result in enumerate(on_cuda[1:], start=1):
            for e, g in zip(_weights(on_cuda[0], case), _weights(result, case)):
                assert torch.equal(e, g), f"{case}: rank {rank} differs from rank 0 on CUDA"


@pytest.mark.parametrize("case", cases_for(2))
def test_two_ranks_sharing_the_gpu_over_gloo(case: str, runs) -> None:
    assert runs("cuda2_gloo")[0]["backend"] == "gloo"
    _compare(case, runs("cpu2"), runs("cuda2_gloo"))


@pytest.mark.parametrize("case", cases_for(1))
def test_one_rank_over_nccl(case: str, runs) -> None:
    assert "nccl" in runs("cuda1_nccl")[0]["backend"]
    _compare(case, runs("cpu1"), runs("cuda1_nccl"))


@pytest.mark.parametrize("case", cases_for(1))
def test_one_rank_over_the_native_nccl_communicator(case: str, runs) -> None:
    from bagua_core.runtime import native

    if not native.has_nccl:
        pytest.fail(f"CUDA exists but bagua's NCCL communicator is unavailable: {native.nccl_unavailable_reason}")
    _compare(case, runs("cpu1"), runs("cuda1_native"))


@pytest.mark.parametrize("key", ["amp_cuda2_gloo", "amp_cuda1_nccl"])
@pytest.mark.parametrize("case", cases_for(2))
def test_autocast_and_grad_scaler(case: str, key: str, runs) -> None:
    if key.endswith("1_nccl") and case not in cases_for(1):
        pytest.skip(f"{case} needs two ranks")
    check_amp_results(case, runs(key))
