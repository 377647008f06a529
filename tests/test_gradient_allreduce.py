"""gradient_allreduce equals torch DDP on gloo; ranks bit-identical; hierarchical gives the same."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_core.api import tensors

import bagua_core as bagua
from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithm
from tests.distributed import run_workers
from tests.models import SmallNet, batch

STEPS = 4


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int) -> list[torch.Tensor]:
    for step in range(STEPS):
        x, y = batch(rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def _compare_with_ddp(rank: int, algorithm: object, do_flatten: bool, bucket_size: int) -> list[torch.Tensor]:
    import os

    os.environ["BAGUA_DEFAULT_BUCKET_SIZE"] = str(bucket_size)
    reference = SmallNet(seed=rank)  # different init per rank: wrapping must broadcast rank 0's
    ddp = torch.nn.parallel.DistributedDataParallel(reference)
    ddp_params = _train(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9), rank)

    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model = model.with_bagua([optimizer], algorithm, do_flatten=do_flatten)
    params = _train(model, optimizer, rank)
    for ours, theirs in zip(params, ddp_params):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    return params


@pytest.mark.parametrize(
    "world_size,local_size,algorithm,do_flatten,bucket_size",
    [
        (2, None, "gradient_allreduce", True, 10 * 1024 * 1024),
        (3, None, {"name": "gradient_allreduce", "average": True}, False, 512),
        (3, None, GradientAllReduceAlgorithm(hierarchical=False), True, 300),
        (4, 2, GradientAllReduceAlgorithm(hierarchical=True), True, 512),
        (3, 1, {"name": "gradient_allreduce", "hierarchical": True}, False, 10 * 1024 * 1024),
    ],
)
def test_equals_ddp_and_ranks_identical(world_size, local_size, algorithm, do_flatten, bucket_size) -> None:
    results = run_workers(_compare_with_ddp, world_size, algorithm, do_flatten, bucket_size, local_size=local_size)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)  # bit-identical


def _sum_and_no_sync(rank: int) -> None:
    n = bagua.get_world_size()
    model = torch.nn.Linear(3, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model = model.with_bagua([optimizer], {"name": "gradient_allreduce", "average": False})
    x = torch.full((1, 3), float(rank + 1))
    model(x).sum().backward()
    assert torch.equal(model.weight.grad, torch.full((1, 3), float(sum(range(1, n + 1)))))
    optimizer.zero_grad()
    with model.no_sync():
        model(x).sum().backward()
    assert torch.equal(model.weight.grad, torch.full((1, 3), float(rank + 1)))  # local only
    model(x).sum().backward()
    assert torch.equal(model.weight.grad, torch.full((1, 3), 2.0 * sum(range(1, n + 1))))


def test_sum_and_no_sync_accumulation() -> None:
    run_workers(_sum_and_no_sync, 3)


def _ignored_and_switch(rank: int) -> None:
    model = SmallNet(seed=rank)
    model._bagua_params_and_buffers_to_ignore = ["head.weight", "head.bias"]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], "gradient_allreduce")
    assert model.bagua_module_name.startswith("SmallNet_")
    assert all("head" not in tensors.name_of(t) for b in model.bagua_buckets for t in b.tensors)
    fc1 = torch.empty_like(model.fc1.weight)
    head = model.head.weight.detach().clone()
    fc1.copy_(model.fc1.weight)
    bagua.broadcast(fc1, src=0)
    assert torch.equal(fc1, model.fc1.weight)  # broadcast at wrap
    gathered = [torch.empty_like(head) for _ in range(bagua.get_world_size())]
    dist.all_gather(gathered, head)
    assert not torch.equal(gathered[0], gathered[1])  # ignored: not broadcast
    x, y = batch(rank, 0)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    assert model.bagua_train_step_counter == 1
    model = model.with_bagua([optimizer], {"name": "gradient_allreduce", "hierarchical": True})
    assert type(model.bagua_algorithm).__name__ == "GradientAllReduceAlgorithmImpl"
    assert model.bagua_algorithm.hierarchical
    F.cross_entropy(model(x), y).backward()
    assert model.bagua_train_step_counter == 1  # counter restarts with the new algorithm
    grads = [torch.empty_like(model.fc1.weight.grad) for _ in range(bagua.get_world_size())]
    dist.all_gather(grads, model.fc1.weight.grad)
    assert all(torch.equal(grads[0], g) for g in grads)


def test_ignore_list_and_switching_algorithm() -> None:
    run_workers(_ignored_and_switch, 2)


def _in_flight(rank: int, do_flatten: bool) -> list[torch.Tensor]:
    from bagua_core.lifecycle.bucket_ops import centralized

    started = []
    original = centralized.allreduce_inplace_start

    def counting(*args, **kwargs):
        started.append(1)
        return original(*args, **kwargs)

    centralized.allreduce_inplace_start = counting
    params = _compare_with_ddp(rank, "gradient_allreduce", do_flatten, 300)
    assert len(started) >= 2 * STEPS  # several buckets per step left in flight until the end of backward
    return params


@pytest.mark.parametrize("do_flatten", [True, False])
def test_equals_ddp_with_allreduces_in_flight(do_flatten: bool) -> None:
    """gloo's allreduce for every bucket (small-message path off): each bucket's allreduce stays in
    flight while later buckets start, and the end of backward completes them (non-flattened buckets
    are written back then)."""
    results = run_workers(_in_flight, 3, do_flatten, env={"BAGUA_SMALL_ALLREDUCE_BYTES": "0"})
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


def _bound_slots(rank: int) -> None:
    model = SmallNet(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], "gradient_allreduce")
    x, y = batch(rank, 0)
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        model(x)  # an evaluation: nothing is bound
    assert all(p.grad is None for p in model.parameters())
    loss = F.cross_entropy(model(x), y)  # a training forward: each gradient is its zeroed bucket slot
    slots = {id(t): view for bucket in model.bagua_buckets for t, view in zip(bucket.tensors, bucket._views)}
    for p in model.parameters():
        assert p.grad is slots[id(p)] and not p.grad.any()
    loss.backward()
    for p in model.parameters():
        assert p.grad is slots[id(p)] and p.grad.any()  # accumulated in place, then averaged there
    gathered = [torch.zeros_like(model.bagua_buckets[0].buffer) for _ in range(2)]
    dist.all_gather(gathered, model.bagua_buckets[0].buffer)
    assert torch.equal(gathered[0], gathered[1])


def test_small_gradients_accumulate_in_their_bucket_slots() -> None:
    run_workers(_bound_slots, 2)
