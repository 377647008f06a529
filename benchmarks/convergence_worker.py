"""One rank of the convergence benchmark: trains the main job's model on the digits data with each
method and records (wall-clock seconds, mean training loss, test accuracy) after every epoch.

The clock runs only while training: evaluation after each epoch is excluded. Rank 0 appends one JSON
line per method to ``--out``.

    python -m benchmarks.convergence_worker --methods ddp,bytegrad --epochs 10 --out curves.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from benchmarks.methods import finish, prepare

__all__ = ["train_curve", "main"]


def _mean(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def train_curve(method: str, epochs: int, batch_size: int, lr: float, hidden: int, seed: int = 0) -> dict:
    """Train from the same initial weights and data order as ``bagua train``; returns the curve."""
    from bagua_examples.digits import DigitsMLP, load_digits

    rank, world = dist.get_rank(), dist.get_world_size()
    train_x, train_y, test_x, test_y = load_digits(seed=seed)
    torch.manual_seed(seed)
    shard = torch.arange(rank, len(train_y), world)
    steps_per_epoch = len(train_y) // world // batch_size  # equal on every rank
    # qadam as in the main job: lr 5e-3, two epochs of full-precision warmup
    model, optimizer = prepare(method, DigitsMLP(hidden), lr=lr, momentum=0.9, qadam_lr=5e-3,
                               qadam_warmup=2 * steps_per_epoch)
    curve: list[dict] = []
    clock = 0.0
    for epoch in range(epochs):
        order = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(seed + epoch))]
        model.train()
        losses = []
        started = time.perf_counter()
        for step in range(steps_per_epoch):
            idx = order[step * batch_size : (step + 1) * batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        clock += time.perf_counter() - started
        model.eval()
        with torch.no_grad():
            accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
        curve.append({"epoch": epoch + 1, "seconds": _mean(clock), "loss": _mean(sum(losses) / len(losses)),
                      "test_accuracy": _mean(accuracy)})
    finish(method, model)
    return {"method": method, "world_size": world, "batch_size": batch_size, "curve": curve}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", required=True)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    import bagua_core as bagua

    bagua.init_process_group()
    try:
        for method in args.methods.split(","):
            row = train_curve(method, args.epochs, args.batch_size, args.lr, args.hidden)
            if dist.get_rank() == 0:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    finally:
        bagua.destroy_process_group()


if __name__ == "__main__":
    main()
