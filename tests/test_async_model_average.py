"""async: warmup equals gradient allreduce; afterwards a background thread pulls the workers'
weights together (abort leaves every rank with the mean); abort/resume cycles; ranks that run
different numbers of steps; abort returns only once every rank has aborted; ``weighting="samples"``
weights a round by each rank's samples per round since the averaging began, its throughput (equal: the mean,
bit for bit)."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_algorithms.async_model_average import AsyncModelAverageAlgorithm
from tests.distributed import run_workers
from tests.models import SmallNet, batch


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor.contiguous())
    return out


def _step(model, optimizer, rank: int, t: int) -> None:
    x, y = batch(rank, t)
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()


def _scenario(rank: int) -> dict:
    n = dist.get_world_size()
    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], AsyncModelAverageAlgorithm(sync_interval_ms=20, warmup_steps=2))
    impl = model.bagua_algorithm
    for t in range(2):  # warmup: gradient allreduce keeps the ranks identical
        _step(model, optimizer, rank, t)
        everyone = _gather(_flat(model))
        assert all(torch.equal(everyone[0], e) for e in everyone)
    assert impl.averager is None

    # 1. pure averaging: no training, weights moved apart by hand; abort leaves every rank at the mean
    model.train()
    model(batch(rank, 0)[0])  # step 3 starts the averaging thread (this forward holds the weight lock)
    assert impl.averager is not None and impl.averager.running
    before = _flat(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(float(rank))
    time.sleep(0.1)
    impl.abort(model)
    after = _flat(model)
    torch.testing.assert_close(after, before + (n - 1) / 2, rtol=0, atol=1e-5)
    everyone = _gather(after)
    assert all(torch.allclose(everyone[0], e, atol=1e-6) for e in everyone)
    impl.abort(model)  # a second abort is a no-op

    # 2. aborted: training stays local, ranks drift apart
    for t in range(3):
        _step(model, optimizer, rank, 10 + t)
    everyone = _gather(_flat(model))
    assert not torch.allclose(everyone[0], everyone[1], atol=1e-4)

    # 3. resume, train different numbers of steps per rank (with pauses so rounds happen), abort
    impl.resume(model)
    rounds_before = impl.averager.rounds
    for t in range(3 + 4 * rank):  # rank 1's 4 more steps take 0.4 s more: more than a loaded machine's jitter
        _step(model, optimizer, rank, 20 + t)  # (with 10 ms pauses rank 0 once waited less than rank 1)
        time.sleep(0.1)
    started = time.monotonic()
    impl.abort(model)  # rank 0 finishes first and waits here for the others
    waited = time.monotonic() - started
    assert impl.averager.rounds > rounds_before
    everyone = _gather(_flat(model))
    assert all(torch.allclose(everyone[0], e, atol=1e-5) for e in everyone)

    # 4. another cycle, then re-wrapping shuts the loop down
    impl.resume(model)
    for t in range(2):
        _step(model, optimizer, rank, 40 + t)
    averager = impl.averager
    model = model.with_bagua([optimizer], "gradient_allreduce")
    assert not averager.running
    return {"waited": waited, "rounds": averager.rounds}


def test_async_scenario() -> None:
    results = run_workers(_scenario, 2, timeout=90)
    assert results[0]["waited"] > results[1]["waited"]  # the rank with fewer steps waited in abort


def _abort_during_warmup(rank: int) -> None:
    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], {"name": "async", "sync_interval_ms": 10, "warmup_steps": 3})
    for t in range(3 + 3 * rank):  # rank 0 stops inside warmup+0 steps, rank 1 averages asynchronously
        _step(model, optimizer, rank, t)
    model.bagua_algorithm.abort(model)
    everyone = _gather(_flat(model))
    assert all(torch.allclose(everyone[0], e, atol=1e-5) for e in everyone)


def test_ranks_with_different_step_counts_across_warmup() -> None:
    run_workers(_abort_during_warmup, 3, timeout=120)


def _exit_without_abort(rank: int) -> bool:
    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], {"name": "async", "sync_interval_ms": 5})
    for t in range(3 + rank):
        _step(model, optimizer, rank, t)
    return model.bagua_algorithm.averager.running  # the process then exits with the loop still running


def test_no_deadlock_at_exit_without_abort() -> None:
    assert run_workers(_exit_without_abort, 2, timeout=60) == [True, True]


def _train(model, optimizer, rank: int, steps: int, size: int, offset: int) -> None:
    for t in range(steps):
        x, y = batch(rank, offset + t, size=size)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def _check_round(after: torch.Tensor, trained: torch.Tensor, everyone: list[torch.Tensor], samples: list[int],
                 equal: bool) -> None:
    """The round moved this rank from ``trained`` to ``after``: the equal-weight round as it computes it, bit for
    bit, or ``sum_r s_r x_r / sum_r s_r`` over ``everyone``'s trained weights."""
    if equal:
        reduced = everyone[0].clone()
        for other in everyone[1:]:
            reduced += other
        expected = trained + (reduced / len(everyone) - trained)
        assert torch.equal(after, expected), (after - expected).abs().max()
        return
    expected = sum(s * x.double() for s, x in zip(samples, everyone)) / sum(samples)
    torch.testing.assert_close(after, expected.float(), rtol=0, atol=1e-6)


def _one_weighted_round(rank: int, weighting: str, steps: list[int], sizes: list[int]) -> None:
    """Rank r trains ``steps[r]`` steps of ``sizes[r]`` samples while the rounds are stopped, then exactly one round
    runs (resume, then abort: the round that every rank's stop flag ends); it must leave every rank at
    ``sum_r s_r x_r / sum_r s_r`` (the mean with "equal")."""
    n = dist.get_world_size()
    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], {"name": "async", "sync_interval_ms": 600_000, "weighting": weighting})
    impl = model.bagua_algorithm
    impl.abort(model)  # into the averaging phase, its rounds stopped (nothing trained yet: they average equally)
    _train(model, optimizer, rank, steps[rank], sizes[rank], 0)
    trained = _flat(model)
    impl.resume(model)
    impl.abort(model)
    samples = [s * b for s, b in zip(steps, sizes)]
    _check_round(_flat(model), trained, _gather(trained), samples, weighting == "equal" or len(set(samples)) == 1)
    if weighting == "samples":
        assert impl.averager.last_weight == pytest.approx(n * samples[rank] / sum(samples))


@pytest.mark.parametrize("weighting,steps,sizes", [
    ("samples", [1, 3], [6, 4]),
    ("samples", [3, 1, 2], [2, 5, 4]),
    ("samples", [2, 2], [5, 5]),
    ("equal", [1, 3], [6, 4]),
])
def test_a_round_weighted_by_samples(weighting: str, steps: list[int], sizes: list[int]) -> None:
    run_workers(_one_weighted_round, len(steps), weighting, steps, sizes, timeout=90)


def _rounds_weighted_by_samples_so_far(rank: int, first: list[int], second: list[int], sizes: list[int]) -> None:
    """Rank r trains ``first[r]`` steps, one round runs, then ``second[r]`` steps and one more round: the second round
    weights rank r by all its samples, ``(first[r] + second[r]) * sizes[r]`` (every rank was in every round), not by
    the samples since the first round."""
    n = dist.get_world_size()
    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], {"name": "async", "sync_interval_ms": 600_000, "weighting": "samples"})
    impl = model.bagua_algorithm
    impl.abort(model)  # into the averaging phase, its rounds stopped
    _train(model, optimizer, rank, first[rank], sizes[rank], 0)
    impl.resume(model)
    impl.abort(model)  # one round
    _train(model, optimizer, rank, second[rank], sizes[rank], 100)
    trained = _flat(model)
    impl.resume(model)
    impl.abort(model)  # the second round
    samples = [(a + b) * size for a, b, size in zip(first, second, sizes)]
    assert impl.averager.last_weight == pytest.approx(n * samples[rank] / sum(samples))
    _check_round(_flat(model), trained, _gather(trained), samples, len(set(samples)) == 1)


@pytest.mark.parametrize("first,second,sizes", [
    ([3, 1], [1, 3], [4, 4]),  # equal samples so far, unequal since the first round
    ([2, 1, 1], [1, 1, 3], [4, 6, 2]),
])
def test_a_round_weights_the_samples_trained_so_far(first: list[int], second: list[int], sizes: list[int]) -> None:
    run_workers(_rounds_weighted_by_samples_so_far, len(first), first, second, sizes, timeout=90)


def _original_signature(rank: int) -> None:
    """The original's ``bagua.torch_api`` class reifies its impl from the config's every option."""
    from bagua.torch_api.algorithms.async_model_average import AsyncModelAverageAlgorithm as Original

    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], Original(sync_interval_ms=10))
    for t in range(2):
        _step(model, optimizer, rank, t)
    model.bagua_algorithm.abort(model)
    everyone = _gather(_flat(model))
    assert torch.allclose(everyone[0], everyone[1], atol=1e-6)


def test_the_original_signature_wraps() -> None:
    run_workers(_original_signature, 2, timeout=90)
