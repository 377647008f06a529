"""bytegrad: every rank bit-identical, the applied average within two quantisation steps of the exact
mean, sizes that do not split evenly (padding), flat and hierarchical (2 nodes of 2)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import bagua_core as bagua
from bagua_algorithms.bytegrad import ByteGradAlgorithm
from bagua_algorithms.bytegrad.compressed import compressed_allreduce
from bagua_core.runtime.process_group import get_default_group
from tests.distributed import run_workers
from tests.models import SmallNet, batch


def _gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor.contiguous())
    return out


def _check_close_to_mean(result: torch.Tensor, inputs: list[torch.Tensor], average: bool) -> None:
    """Within two quantisation steps (range / 255 of the widest input) of the exact mean (or sum)."""
    exact = sum(t.double() for t in inputs)
    steps = max(float(t.max() - t.min()) for t in inputs) / 255
    if average:
        exact = exact / len(inputs)
    else:
        steps *= len(inputs)
    error = (result.double() - exact).abs().max().item()
    assert error <= 2 * steps + 1e-6, f"error {error} > 2 quantisation steps ({steps})"
    assert error > 0  # it is lossy: the exchange really compressed


def _op_cases(rank: int, hierarchical: bool) -> None:
    group = get_default_group()
    for numel, average, scale in [(1001, True, 1.0), (7, True, 100.0), (64, False, 0.01), (2, True, 1.0)]:
        gen = torch.Generator().manual_seed(10 * numel + rank)
        x = torch.randn(numel, generator=gen) * scale + rank
        inputs = _gather(x)
        y = x.clone()
        compressed_allreduce(y, group, average=average, hierarchical=hierarchical)
        everyone = _gather(y)
        assert all(torch.equal(everyone[0], other) for other in everyone)  # bit-identical
        if numel > 2:
            _check_close_to_mean(y, inputs, average)


@pytest.mark.parametrize("world_size,local_size,hierarchical", [(3, 3, False), (2, 2, True), (4, 2, True)])
def test_compressed_allreduce(world_size: int, local_size: int, hierarchical: bool) -> None:
    run_workers(_op_cases, world_size, hierarchical, local_size=local_size)


def _train(rank: int, algorithm: object, bucket_size: int) -> None:
    import os

    os.environ["BAGUA_DEFAULT_BUCKET_SIZE"] = str(bucket_size)
    model = SmallNet(seed=rank)
    plain = SmallNet(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], algorithm)
    n_peers = bagua.get_world_size() if not model.bagua_algorithm.hierarchical else model.process_group.num_nodes
    if n_peers == 3 and bucket_size < 1000:
        assert any(bucket.padded_numel % n_peers for bucket in model.bagua_buckets)  # padding is exercised
    for step in range(3):
        plain.load_state_dict(model.state_dict())
        x, y = batch(rank, step)
        F.cross_entropy(plain(x), y).backward()
        local = torch.cat([p.grad.reshape(-1) for p in plain.parameters()])
        plain.zero_grad()
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        averaged = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        everyone = _gather(averaged)
        assert all(torch.equal(everyone[0], other) for other in everyone)
        _check_close_to_mean(averaged, _gather(local), average=True)
        optimizer.step()


@pytest.mark.parametrize(
    "world_size,local_size,algorithm,bucket_size",
    [
        (3, 3, ByteGradAlgorithm(hierarchical=False), 300),
        (3, 3, "bytegrad", 10 * 1024 * 1024),
        (4, 2, {"name": "bytegrad", "hierarchical": True}, 512),
    ],
)
def test_bytegrad_training(world_size: int, local_size: int, algorithm: object, bucket_size: int) -> None:
    run_workers(_train, world_size, algorithm, bucket_size, local_size=local_size)


def _deferred_like_one_at_a_time(rank: int, hierarchical: bool, defers: bool) -> None:
    import os

    from bagua_core.lifecycle.bucket import BaguaBucket
    from bagua_algorithms.bytegrad import pipeline

    os.environ["BAGUA_DEFAULT_BUCKET_SIZE"] = "300"
    pipeline.SEGMENT_NUMEL = 8  # several segments a chunk, a different count in each bucket
    deferred: list[str] = []
    defer, may_defer_as_built = BaguaBucket.defer, BaguaBucket.may_defer

    def counting_defer(bucket: BaguaBucket, finish) -> None:
        deferred.append(bucket.name)
        defer(bucket, finish)

    results = []
    for may_defer in (True, False):
        BaguaBucket.defer = counting_defer
        if not may_defer:
            BaguaBucket.may_defer = lambda bucket, op: False
        try:
            model = SmallNet(seed=rank)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model = model.with_bagua([optimizer], ByteGradAlgorithm(hierarchical=hierarchical))
            grads = []
            for step in range(2):
                optimizer.zero_grad()
                x, y = batch(rank, step)
                F.cross_entropy(model(x), y).backward()
                grads.append(torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()]))
                optimizer.step()
            results.append(grads)
            buckets = len(model.bagua_buckets)
            model.bagua_shutdown()
        finally:
            BaguaBucket.defer = defer
            BaguaBucket.may_defer = may_defer_as_built
    assert buckets >= 3 and len(deferred) == (2 * buckets if defers else 0), (buckets, deferred)  # each step
    for step, (left_in_flight, one_at_a_time) in enumerate(zip(*results)):
        assert torch.equal(left_in_flight, one_at_a_time), f"step {step}: the buckets left in flight differ"


@pytest.mark.parametrize("world_size,local_size,hierarchical,defers",
                         [(3, 3, False, True), (6, 2, True, True), (2, 2, False, False), (4, 2, True, False)])
def test_buckets_in_flight_together_match_one_at_a_time(world_size: int, local_size: int, hierarchical: bool,
                                                        defers: bool) -> None:
    """With more than one peer, every bucket's exchange stays in flight until the end of backward (a later
    bucket's round 1 is sent before an earlier one's round 2), with a different number of segments per
    bucket: the same bits as each bucket exchanged alone (the rounds' tags keep the messages apart).
    With one peer (2 ranks, or 2 nodes), each bucket is exchanged before the next starts."""
    run_workers(_deferred_like_one_at_a_time, world_size, hierarchical, defers, local_size=local_size)
