"""low_precision_decentralized equals a reference written from the formula (MinMaxUInt8 in plain
torch, neighbours' values through torch.distributed.all_gather), flat (ring of 4, left != right)
and hierarchical (2 nodes of 2), intervals 1 and 2."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_algorithms.low_precision_decentralized import LowPrecisionDecentralizedAlgorithm
from tests.distributed import run_workers
from tests.models import SmallNet, batch

STEPS = 5


def _minmax_roundtrip(z: torch.Tensor) -> torch.Tensor:
    """D(C(z)) for one chunk, from DESIGN.md (eps = 1e-7, rint = round half to even), in fp32."""
    mn, mx = z.min(), z.max()
    scale = torch.tensor(255.0) / (mx - mn + torch.tensor(1e-7))
    upper = torch.round(mx * scale)
    lower = upper - 255.0
    q = torch.clamp(torch.minimum(torch.round(z * scale), upper) - lower, 0, 255).to(torch.uint8)
    return (q.float() + lower) / scale


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


class _Reference:
    """Every rank simulates its own peer's replicas w, l, r from every peer's stepped weights."""

    def __init__(self, x0: torch.Tensor) -> None:
        self.w, self.l, self.r = x0.clone(), x0.clone(), x0.clone()

    def step(self, x: torch.Tensor, hierarchical: bool, local_size: int) -> torch.Tensor:
        n = dist.get_world_size()
        everyone = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(everyone, x)
        if hierarchical:
            peers = [sum(everyone[k * local_size : (k + 1) * local_size]) / local_size for k in range(n // local_size)]
            me = dist.get_rank() // local_size
        else:
            peers, me = everyone, dist.get_rank()
        # every peer's z needs that peer's replicas; all_gather them too (they are this rank's state)
        states = [torch.empty(3 * x.numel()) for _ in range(n)]
        dist.all_gather(states, torch.cat([self.w, self.l, self.r]))
        if hierarchical:
            states = states[::local_size]
        z = []
        for k, state in enumerate(states):
            w, left, right = state.split(x.numel())
            z.append(_minmax_roundtrip(peers[k] + left / 3 + right / 3 - w * (5 / 3)))
        p = len(peers)
        self.l += z[(me - 1) % p]
        self.r += z[(me + 1) % p]
        self.w += z[me]
        return self.w.clone()


def _run(rank: int, cases: list[tuple[bool, int]], local_size: int) -> None:
    os.environ["BAGUA_DEFAULT_BUCKET_SIZE"] = str(100 * 1024 * 1024)  # one bucket: one min/max
    for hierarchical, interval in cases:
        model = SmallNet(seed=rank)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        algorithm = LowPrecisionDecentralizedAlgorithm(hierarchical=hierarchical, communication_interval=interval)
        model = model.with_bagua([optimizer], algorithm)
        assert len(model.bagua_buckets) == 1
        reference = SmallNet(seed=0)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
        ref = _Reference(_flat(reference))
        torch.testing.assert_close(_flat(model), _flat(reference), rtol=0, atol=0)
        for t in range(STEPS):
            x, y = batch(rank, t)
            for net, opt in ((model, optimizer), (reference, ref_opt)):
                opt.zero_grad()
                F.cross_entropy(net(x), y).backward()
                opt.step()
            if t % interval == 0:
                averaged = ref.step(_flat(reference), hierarchical, local_size)
                with torch.no_grad():
                    offset = 0
                    for p in reference.parameters():
                        p.copy_(averaged[offset : offset + p.numel()].view_as(p))
                        offset += p.numel()
            torch.testing.assert_close(_flat(model), _flat(reference), rtol=1e-5, atol=1e-5,
                                       msg=lambda m, c=f"hier={hierarchical} interval={interval} step {t}": f"{c}: {m}")
        everyone = [torch.empty_like(_flat(model)) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, _flat(model))
        assert not torch.equal(everyone[0], everyone[-1])  # decentralized: ranks still differ


@pytest.mark.parametrize(
    "world_size,local_size,cases",
    [(4, 2, [(False, 1), (True, 1), (False, 2)]), (3, 3, [(False, 1)])],
)
def test_equals_reference(world_size: int, local_size: int, cases: list) -> None:
    run_workers(_run, world_size, cases, local_size, local_size=local_size)


def _prepared_equals_unprepared(rank: int) -> None:
    from bagua_algorithms.low_precision_decentralized.op import LowPrecisionDecentralizedOp

    os.environ["BAGUA_DEFAULT_BUCKET_SIZE"] = "256"  # several buckets: bucket k+1 is prepared while k runs
    results = []
    original = LowPrecisionDecentralizedOp.prepare
    for prepare in (original, lambda op, bucket: None):
        LowPrecisionDecentralizedOp.prepare = prepare
        try:
            model = SmallNet(seed=0)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            model = model.with_bagua([optimizer], LowPrecisionDecentralizedAlgorithm(hierarchical=False))
            assert len(model.bagua_buckets) > 2
            for t in range(3):
                x, y = batch(rank, t)
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
            results.append(_flat(model))
            model.bagua_shutdown()
        finally:
            LowPrecisionDecentralizedOp.prepare = original
    assert torch.equal(results[0], results[1])


def test_difference_computed_ahead_changes_nothing() -> None:
    """The post-step hook computes bucket k+1's difference while bucket k is exchanged: same bits."""
    run_workers(_prepared_equals_unprepared, 3)


def _resynchronized(rank: int) -> None:
    """What fault-tolerant mode runs on a new quorum: the weights averaged over every rank, the replicas
    w, l, r restarted from the average (as the algorithm starts), so the ring goes on from there."""
    from bagua_algorithms.low_precision_decentralized import LowPrecisionDecentralizedOp

    model = SmallNet(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], LowPrecisionDecentralizedAlgorithm(hierarchical=False))
    for t in range(2):  # the ranks' weights and replicas drift apart
        optimizer.zero_grad()
        F.cross_entropy(model(batch(rank, t)[0]), batch(rank, t)[1]).backward()
        optimizer.step()
    before = _flat(model)
    everyone = [torch.empty_like(before) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, before)
    assert not torch.equal(everyone[0], everyone[1])
    # the last round's neighbour messages are added into l and r on the communication thread; fault-tolerant
    # mode completes them before its commit decision, as here (resynchronizing while they land left l or r
    # different from the weights, under load)
    model.bagua_algorithm.complete_exchanges()
    for bucket in model.bagua_buckets:
        for op in bucket._ops:
            if isinstance(op, LowPrecisionDecentralizedOp):
                op.resynchronize(bucket)
    after = _flat(model)
    torch.testing.assert_close(after, sum(everyone) / len(everyone), rtol=1e-6, atol=1e-7)
    dist.all_gather(everyone, after)
    assert all(torch.equal(everyone[0], other) for other in everyone)  # every rank the same weights
    for bucket in model.bagua_buckets:
        op = next(op for op in bucket._ops if isinstance(op, LowPrecisionDecentralizedOp))
        for replica in (op.weight, op.left_peer_weight, op.right_peer_weight):
            assert torch.equal(replica, bucket.flattened_view().detach().float().reshape(-1))


def test_resynchronize_averages_and_restarts_the_replicas() -> None:
    run_workers(_resynchronized, 3, timeout=120)


def _replicas_after_training(rank: int, hierarchical: bool) -> dict:
    """The original Bagua's own check (tests/torch_api/test_low_precision_decentralized.py::test_algorithm),
    on CPU: 10 steps, then the bucket's replicas read right after the last ``optimizer.step()``."""
    torch.manual_seed(rank)
    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model = model.with_bagua([optimizer], LowPrecisionDecentralizedAlgorithm(hierarchical=hierarchical))
    bucket = model.bagua_buckets[0]
    for _ in range(10):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 4)).backward()
        optimizer.step()
    out = {"weights": _flat(model), "weight": torch.norm(bucket._weight),
           "left": torch.norm(bucket._left_peer_weight), "right": torch.norm(bucket._right_peer_weight)}
    model.bagua_shutdown()
    return out


@pytest.mark.parametrize("hierarchical", [False, True])
def test_replicas_read_between_steps_are_current(hierarchical: bool) -> None:
    """The neighbours' messages of the last round stay in flight after ``optimizer.step()`` (they overlap
    the next step); reading a bucket's replicas completes them first, so each rank's ``_weight`` is what
    its neighbours hold as their ``_right_peer_weight`` / ``_left_peer_weight`` (one round behind before)."""
    n = 4
    results = run_workers(_replicas_after_training, n, hierarchical, local_size=n if hierarchical else 1)
    for rank in range(n):
        if hierarchical:  # one node: every rank ends with the same weights
            assert torch.equal(results[rank]["weights"], results[(rank - 1) % n]["weights"])
        else:
            assert torch.equal(results[rank]["weight"], results[(rank - 1) % n]["right"]), rank
            assert torch.equal(results[rank]["weight"], results[(rank + 1) % n]["left"]), rank
