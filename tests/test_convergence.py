"""Every algorithm of issue 4 trains the main job's model (``DigitsMLP`` on the shipped digits data,
2 workers, disjoint shards) to within 1% test accuracy of gradient_allreduce.

QAdam freezes Adam's second moment v after warmup: a weight whose gradient was exactly zero during
the whole warmup (a pixel that is blank in every warmup batch, a dead ReLU unit) keeps v = 0 and
its first later gradient is divided by eps alone. The run therefore uses a warmup of two epochs and
eps = 1e-4 (with 20 warmup steps and eps = 1e-8 the digits run diverges, as the formula dictates).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from tests.distributed import run_workers

EPOCHS, BATCH = 8, 32
ALGORITHMS = [
    {"name": "gradient_allreduce"},
    {"name": "bytegrad", "hierarchical": False},
    {"name": "bytegrad", "hierarchical": True},
    {"name": "decentralized", "hierarchical": False, "peer_selection_mode": "shift_one"},
    {"name": "decentralized", "hierarchical": True, "communication_interval": 2},
    {"name": "low_precision_decentralized", "hierarchical": False},
    {"name": "qadam", "hierarchical": False},
    {"name": "async", "sync_interval_ms": 50, "warmup_steps": 10},
]


def _train(rank: int, algorithm: dict) -> float:
    from bagua_algorithms.q_adam import QAdamOptimizer
    from bagua_examples.digits import DigitsMLP, load_digits

    world = dist.get_world_size()
    train_x, train_y, test_x, test_y = load_digits(seed=0)
    torch.manual_seed(0)
    model = DigitsMLP()
    shard = torch.arange(rank, len(train_y), world)
    steps_per_epoch = len(shard) // BATCH
    if algorithm["name"] == "qadam":
        optimizer = QAdamOptimizer(model.parameters(), lr=0.005, warmup_steps=2 * steps_per_epoch, eps=1e-4)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model = model.with_bagua([optimizer], dict(algorithm))
    for epoch in range(EPOCHS):
        order = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(epoch))]
        for step in range(steps_per_epoch):
            idx = order[step * BATCH : (step + 1) * BATCH]
            optimizer.zero_grad()
            F.cross_entropy(model(train_x[idx]), train_y[idx]).backward()
            optimizer.step()
    if algorithm["name"] == "async":
        model.bagua_algorithm.abort(model)
    model.eval()
    with torch.no_grad():
        accuracy = torch.tensor([(model(test_x).argmax(1) == test_y).double().mean().item()])
    dist.all_reduce(accuracy)  # decentralized ranks hold different weights: report their mean
    model.bagua_shutdown()
    return accuracy.item() / world


def _train_all(rank: int) -> list[float]:
    return [_train(rank, algorithm) for algorithm in ALGORITHMS]


@pytest.mark.slow
def test_every_algorithm_reaches_gradient_allreduce_accuracy() -> None:
    accuracies = run_workers(_train_all, 2, local_size=1, timeout=280)[0]
    report = {f"{i}:{a['name']}": round(acc, 4) for i, (a, acc) in enumerate(zip(ALGORITHMS, accuracies))}
    baseline = accuracies[0]
    print(report)
    assert baseline > 0.9, report
    for algorithm, accuracy in zip(ALGORITHMS, accuracies):
        assert accuracy >= baseline - 0.01, (algorithm, report)
