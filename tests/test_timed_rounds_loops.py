"""Rounds bounded in time (``round_seconds``) in the training loops users write, on ranks of unequal speed (rank 1
sleeps a few milliseconds a step), diloco and sparseloco, each loop several times over:

- a loop that makes a collective of its own every step (the loss all-reduced for logging, as Lightning's
  ``sync_dist`` does): no round waits for another replica on the training thread, so nothing deadlocks;
- a loop of the same step count on every rank (an epoch of a ``DistributedSampler``): the rank that finishes first
  joins the rounds the slower one still runs, contributing nothing, until both are done (at ``bagua_shutdown``,
  and at ``destroy_process_group``, which also runs at exit); every rank ends with the same ``theta_global``.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from tests.distributed import run_workers
from tests.test_powersgd import Net, _batch

OPTIONS = {"diloco": {"name": "diloco", "round_seconds": 0.05},
           "sparseloco": {"name": "sparseloco", "round_seconds": 0.05, "chunk_size": 100, "topk": 7}}


def _train(rank: int, options: dict, steps: int, all_reduce_loss: bool) -> tuple[int, torch.Tensor]:
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], options)
    impl = model.bagua_algorithm
    for t in range(1, steps + 1):
        x, y = _batch(rank, t)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if all_reduce_loss:
            dist.all_reduce(loss.detach())
        if rank == 1:
            time.sleep(0.004)
    model.bagua_shutdown()  # the join: the faster rank takes part in the slower one's last rounds
    return impl.merged.rounds, torch.cat(impl.starts)


def _loops(rank: int, name: str, repeats: int) -> list[int]:
    rounds = []
    for repeat in range(repeats):
        merged, theta = _train(rank, OPTIONS[name], 60, all_reduce_loss=repeat % 2 == 0)
        everyone = [torch.empty_like(theta) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, theta)
        assert torch.equal(everyone[0], everyone[1]), f"repeat {repeat}: theta_global differs across the replicas"
        rounds.append(merged)
    model = Net()  # the last one is left wrapped: destroy_process_group shuts it down (the join at exit)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], OPTIONS[name])
    for t in range(1, 31):
        x, y = _batch(rank, t)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if rank == 1:
            time.sleep(0.004)
    return rounds


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_loops_with_collectives_or_equal_step_counts_finish_on_every_rank(name: str) -> None:
    rounds = run_workers(_loops, 2, name, 4, timeout=180)
    # rounds merged by the slower rank and joined by the faster one: the same count on both; several per loop
    assert rounds[0] == rounds[1] and min(rounds[0]) >= 2, rounds
