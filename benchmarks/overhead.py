"""Per-step overhead side by side: plain, torch DDP and bagua's gradient_allreduce on the tiny model,
in one job, alternating blocks of steps so that the machine's noise hits all of them alike.
``bagua_ring`` is bagua with the small-message allreduce off (gloo's ring for every bucket, as DDP),
which shows what that path is worth.

    bagua run --standalone --nproc_per_node=2 -m benchmarks.overhead [--blocks 15] [--steps 100]

Prints (rank 0) the median of the blocks' per-step times (slowest rank of each block), the ratio
bagua/DDP and the ratio of the overheads over the plain step, ``(bagua - plain) / (ddp - plain)``,
and with ``--json FILE`` writes them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import bagua_core as bagua
from benchmarks.models import build_model, synthetic_batch

__all__ = ["main"]

KINDS = ("plain", "ddp", "bagua", "bagua_ring")


def _make(kind: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = build_model("tiny", seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if kind == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    elif kind == "bagua":
        model = model.with_bagua([optimizer], "gradient_allreduce")
    elif kind == "bagua_ring":
        group = bagua.new_group()  # its own communicator, with the small-message path off
        group.get_global_communicator().small_allreduce_bytes = 0
        model = model.with_bagua([optimizer], "gradient_allreduce", process_group=group)
    return model, optimizer


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--steps", type=int, default=100, help="steps per block")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    bagua.init_process_group()
    runs = {kind: _make(kind) for kind in KINDS}
    x, y = synthetic_batch("tiny", 32, seed=bagua.get_rank())

    def steps(kind: str, n: int) -> None:
        model, optimizer = runs[kind]
        for _ in range(n):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()

    for kind in KINDS:
        steps(kind, 20)
    blocks: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(args.blocks):
        for kind in KINDS:
            bagua.barrier()
            started = time.perf_counter()
            steps(kind, args.steps)
            elapsed = torch.tensor([(time.perf_counter() - started) / args.steps * 1e6])
            bagua.allreduce_inplace(elapsed, op=bagua.ReduceOp.MAX)
            blocks[kind].append(elapsed.item())
    median = {kind: statistics.median(values) for kind, values in blocks.items()}
    result = {
        "us_per_step": median,
        "bagua_over_ddp": median["bagua"] / median["ddp"],
        "bagua_ring_over_ddp": median["bagua_ring"] / median["ddp"],
        "overhead_bagua_over_ddp": (median["bagua"] - median["plain"]) / (median["ddp"] - median["plain"]),
        "world_size": bagua.get_world_size(),
    }
    if bagua.get_rank() == 0:
        print(json.dumps(result, indent=2))
        if args.json:
            with open(args.json, "w") as out:
                json.dump(result, out, indent=2)
    bagua.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
