"""diloco with rounds bounded in time on a model sharded with FSDP2 (2 emulated nodes of 2 ranks): the node's
ranks agree on when their round ends (the first step at which any of them would end it), so they run the same
forwards and backwards, and the nodes' pseudo-gradient shards merge weighted by the node's samples (both
ranks' batches). The shards equal, at every step, DiLoCo written here by hand on FSDP2 shards from
docs/algorithms.md's statement, with a fake clock per rank (the node's two ranks at different costs)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tests.distributed import run_workers
from tests.test_diloco import _assign, _flat
from tests.test_diloco_timed import _install_clock
from tests.test_powersgd import Net, _batch
from tests.test_sharded_algorithms import PER_NODE, _fully_shard, _local

COSTS = [1.0, 1.5, 2.0, 2.0]
"""Seconds per step of each rank: node 0's ranks would end a 6 s round after 6 and 4 steps (it ends after 4),
node 1's after 3."""
ROUND_SECONDS = 6.0


def _wants_to_end(rank: int, steps: int) -> bool:
    elapsed = COSTS[rank] * steps
    return elapsed + elapsed / steps / 2 >= ROUND_SECONDS


def _node_ends(rank: int, steps: int) -> bool:
    node = rank // PER_NODE
    return any(_wants_to_end(r, steps) for r in range(node * PER_NODE, (node + 1) * PER_NODE))


def _step(model, optimizer, rank: int, t: int) -> None:
    x, y = _batch(rank, t)
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()


def _reference(rank: int, nodes: int, rounds: int, merges_at: list[int]) -> list[torch.Tensor]:
    """The shards after every step through the ``rounds``-th merge; ``merges_at``: the step at which each round
    merged in the run (it depends on when the other node sent)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (nodes, PER_NODE), mesh_dim_names=("replicate", "shard"))
    between = mesh["replicate"].get_group()
    model = _fully_shard(Net(), mesh["shard"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    shards = _local(list(model.parameters()))
    start = _flat(shards)
    outer = torch.optim.SGD([start], lr=0.7, momentum=0.9, nesterov=True)
    history, t, steps, merged, pending = [], 0, 0, 0, None
    while merged < rounds:
        t, steps = t + 1, steps + 1
        _step(model, optimizer, rank, t)
        if pending is not None and t == merges_at[merged]:  # landed: the outer step, what was trained since kept
            gradient, x_sent = pending
            start.grad = gradient
            outer.step()
            _assign(shards, (_flat(shards) - x_sent) + start)
            merged, pending = merged + 1, None
            if merged == rounds:
                history.append(_flat(shards))
                break
        if pending is None and _node_ends(rank, steps):
            n = steps * 16 * PER_NODE  # the node's samples: both ranks' batches of 16
            x_sent = _flat(shards)
            delta = start - x_sent
            counts = [torch.zeros(1, dtype=torch.float64) for _ in range(nodes)]
            dist.all_gather(counts, torch.tensor([float(n)], dtype=torch.float64), group=between)
            deltas = [torch.empty_like(delta) for _ in range(nodes)]
            dist.all_gather(deltas, delta, group=between)
            total = sum(float(c) for c in counts)
            pending = ((sum(float(c) * d.double() for c, d in zip(counts, deltas)) / total).float(), x_sent)
            steps = 0
        history.append(_flat(shards))
    return history


def _both(rank: int, nodes: int, rounds: int) -> list[list[float]]:
    import bagua_core as bagua

    clock = _install_clock()
    model = _fully_shard(Net(), bagua.node_mesh("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    model = model.with_bagua([optimizer], {"name": "diloco", "round_seconds": ROUND_SECONDS})
    shards = _local(list(model.parameters()))
    impl, weights, history, merges_at, t = model.bagua_algorithm, [], [], [], 0
    while impl.merged.rounds < rounds:
        t += 1
        assert t < 200, f"rank {rank}: {impl.merged.rounds} of {rounds} rounds merged after {t} steps"
        merged = impl.merged.rounds
        x, y = _batch(rank, t)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        clock.now += COSTS[rank]
        loss.backward()
        optimizer.step()
        if impl.merged.rounds != merged:
            weights.append(impl.last_weights)
            merges_at.append(t)
        history.append(_flat(shards))
    model.bagua_shutdown()
    reference = _reference(rank, nodes, rounds, merges_at)
    assert len(reference) == len(history), (len(reference), len(history))
    for t, (seen, expected) in enumerate(zip(history, reference), 1):
        torch.testing.assert_close(seen, expected, rtol=1e-5, atol=1e-6, msg=lambda m, t=t: f"rank {rank}, step {t}: {m}")
    return weights


def test_the_nodes_ranks_agree_and_merges_weigh_the_nodes_samples() -> None:
    weights = run_workers(_both, 2 * PER_NODE, 2, 3, local_size=PER_NODE, timeout=300)
    assert all(w == weights[0] for w in weights)
    assert weights[0][0] == [2 * 128 / 224, 2 * 96 / 224]  # node 0: 4 steps x 2 x 16 samples, node 1: 3 x 2 x 16
