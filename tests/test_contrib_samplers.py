"""Load-balancing samplers: every index once per epoch, balanced complexity, shuffling by epoch."""

from __future__ import annotations

import pytest

from bagua_contrib.load_balancing_sampler import (
    LoadBalancingDistributedBatchSampler,
    LoadBalancingDistributedSampler,
)

N, R = 96, 4
DATA = [list(range((i * 37) % 50 + 1)) for i in range(N)]  # sample i has (i*37)%50+1 "tokens"


def _samplers(**kwargs):
    return [LoadBalancingDistributedSampler(DATA, len, num_replicas=R, rank=r, **kwargs) for r in range(R)]


@pytest.mark.parametrize("random_level", [0.0, 0.5])
def test_every_index_once_balanced_and_shuffled_by_epoch(random_level) -> None:
    samplers = _samplers(seed=3, random_level=random_level)
    orders = []
    for epoch in range(3):
        for s in samplers:
            s.set_epoch(epoch)
        per_rank = [list(s) for s in samplers]
        assert all(len(p) == len(s) == N // R for p, s in zip(per_rank, samplers, strict=True))
        assert sorted(i for p in per_rank for i in p) == list(range(N))  # each index exactly once
        loads = [sum(len(DATA[i]) for i in p) for p in per_rank]
        if random_level == 0:
            assert max(loads) - min(loads) <= 0.02 * sum(loads) / R, loads
        # at each step the ranks' samples differ in cost by about the noise only
        step_spread = [max(len(DATA[p[k]]) for p in per_rank) - min(len(DATA[p[k]]) for p in per_rank)
                       for k in range(N // R)]
        assert max(step_spread) <= 3 + 49 * random_level, step_spread
        if random_level > 0:
            assert max(step_spread) > 3  # the noise does move samples between chunks
        orders.append(per_rank)
    assert orders[0] != orders[1] != orders[2]
    again = _samplers(seed=3, random_level=random_level)
    for s in again:
        s.set_epoch(1)
    assert [list(s) for s in again] == orders[1]  # deterministic from seed + epoch


def test_padding_drop_last_and_no_shuffle() -> None:
    data = DATA[:10]
    padded = [list(LoadBalancingDistributedSampler(data, len, 4, r)) for r in range(4)]
    assert [len(p) for p in padded] == [3] * 4 and {i for p in padded for i in p} == set(range(10))
    dropped = [list(LoadBalancingDistributedSampler(data, len, 4, r, drop_last=True)) for r in range(4)]
    flat = [i for p in dropped for i in p]
    assert [len(p) for p in dropped] == [2] * 4 and len(set(flat)) == 8
    fixed = [list(LoadBalancingDistributedSampler(data, len, 4, r, shuffle=False)) for r in range(4)]
    costs = [sum(len(data[p[k]]) for p in fixed) for k in range(2)]  # step 3 holds wrapped padding
    assert costs == sorted(costs)  # no shuffle: steps in increasing complexity
    with pytest.raises(ValueError, match=r"random_level must be in \[0, 1\], got 2"):
        LoadBalancingDistributedSampler(data, len, 2, 0, random_level=2)
    with pytest.raises(ValueError, match="rank must be in"):
        LoadBalancingDistributedSampler(data, len, 2, 2)


def _token_batches(indices: list[int], budget: int = 120) -> list[list[int]]:
    batches, current, used = [], [], 0
    for i in indices:
        if current and used + len(DATA[i]) > budget:
            batches.append(current)
            current, used = [], 0
        current.append(i)
        used += len(DATA[i])
    return batches + ([current] if current else [])


@pytest.mark.parametrize("drop_last", [False, True])
def test_batch_sampler_same_number_of_batches(drop_last) -> None:
    batchers = [LoadBalancingDistributedBatchSampler(s, _token_batches, drop_last=drop_last) for s in _samplers()]
    for epoch in range(2):
        for b in batchers:
            b.set_epoch(epoch)
        per_rank = [list(b) for b in batchers]
        assert len({len(p) for p in per_rank}) == 1 and all(len(b) == len(per_rank[0]) for b in batchers)
        seen = [i for p in per_rank for batch in p for i in batch]
        if not drop_last:
            assert set(seen) == set(range(N))
        else:
            assert len(seen) == len(set(seen))
        assert all(sum(len(DATA[i]) for i in batch) <= 120 for p in per_rank for batch in p)
    with pytest.raises(TypeError, match="LoadBalancingDistributedSampler"):
        LoadBalancingDistributedBatchSampler(list(range(3)), _token_batches)
