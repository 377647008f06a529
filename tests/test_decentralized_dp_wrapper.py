"""DecentralizedDataParallel against a single-process simulation of the decent-dp update, on 4 ranks.

Simulation (per topology): the first step is local, then ``x_r <- mix_{t-1}(x)_r - lr * g_r(x_r)`` where
``mix_{t-1}`` mixes over the edges of the round launched at step t-1; ``global_avg`` is the mean.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bagua_algorithms.decentralized_dp import DecentralizedDataParallel, get_topology
from tests.distributed import run_workers
from tests.models import SmallNet, batch

STEPS = 4
LR = 0.1
CASES = [("complete", None), ("ring", None), ("one-peer-exp", None), ("alternating-exp-ring", 2),
         ("alternating-exp-ring", 1)]


def _grads(params: list[torch.Tensor], rank: int, step: int) -> list[torch.Tensor]:
    model = SmallNet()
    with torch.no_grad():
        for p, value in zip(model.parameters(), params):
            p.copy_(value)
    x, y = batch(rank, step)
    F.cross_entropy(model(x), y).backward()
    return [p.grad for p in model.parameters()]


def _simulate(name: str, local: int | None, n: int) -> list[list[torch.Tensor]]:
    topology = get_topology(name, n, local or n)
    x = [[p.detach().clone() for p in SmallNet().parameters()] for _ in range(n)]
    for step in range(STEPS):
        grads = [_grads(x[r], r, step) for r in range(n)]
        if step > 0:
            mixed = [list(params) for params in x]
            for edge in topology.edges(step - 1):
                for r in edge.ranks:
                    others = [q for q in edge.ranks if q != r]
                    mixed[r] = [
                        edge.weight * x[r][i] + sum(((1 - edge.weight) / len(others)) * x[q][i] for q in others)
                        for i in range(len(x[r]))
                    ]
            x = mixed
        x = [[p - LR * g for p, g in zip(x[r], grads[r])] for r in range(n)]
    return x


def _train_every_topology(rank: int) -> list[dict]:
    results = []
    for name, local in CASES:
        net = SmallNet(seed=rank)  # different init per rank: the wrapper broadcasts rank 0's
        model = DecentralizedDataParallel(
            net, lambda named: torch.optim.SGD([p for _, p in named], lr=LR), topology=name,
            bucket_size_in_mb=300 / 2**20, local_world_size=local,
        )
        for step in range(STEPS):
            x, y = batch(rank, step)
            F.cross_entropy(model(x), y).backward()
        before = [p.detach().clone() for p in model.parameters()]
        model.global_avg()
        after = [p.detach().clone() for p in model.parameters()]
        results.append({"before": before, "after": after, "buckets": len(model.optimizers)})
    return results


def test_every_topology_matches_simulation_and_global_avg_is_exact() -> None:
    results = run_workers(_train_every_topology, 4, local_size=2)
    for index, (name, local) in enumerate(CASES):
        per_rank = [r[index] for r in results]
        assert per_rank[0]["buckets"] > 2, "several buckets exercise the in-order stepping"
        for result, expected_params in zip(per_rank, _simulate(name, local, 4)):
            for ours, expected in zip(result["before"], expected_params):
                torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-6, msg=f"{name}/{local}")
        if name != "complete":  # gossip leaves the ranks different before global_avg
            assert any(not torch.equal(a, b) for a, b in zip(per_rank[0]["before"], per_rank[1]["before"]))
        means = [torch.stack(ps).mean(0) for ps in zip(*(r["before"] for r in per_rank))]
        for result in per_rank:
            for ours, first, mean in zip(result["after"], per_rank[0]["after"], means):
                assert torch.equal(ours, first), f"{name}: global_avg must leave every rank identical"
                torch.testing.assert_close(ours, mean, rtol=1e-5, atol=1e-6)
