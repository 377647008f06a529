"""Per-step time of decentralized_dp's two call forms (the DecentralizedDataParallel wrapper and
``with_bagua(..., "decentralized_dp")``) in one job, alternating blocks of steps so the machine's noise
hits both alike. To compare two trees (e.g. before and after a change), run it once per tree with
``PYTHONPATH=<tree>``, alternating the runs, and compare the medians side by side:

    PYTHONPATH=. OMP_NUM_THREADS=1 bagua run --standalone --nproc_per_node=2 \\
        benchmarks/decentralized_dp_step.py --model mlp2m --steps 20 --blocks 5

Prints (rank 0) ``RESULT <bagua_core path> {"wrapper": ms, "with_bagua": ms}``: the median over the
blocks of the mean step time (forward, backward with the buckets' steps and rounds, optimizer.step).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import bagua_core as bagua
from bagua_algorithms.decentralized_dp import DecentralizedDataParallel, optim_fn_for
from benchmarks.models import build_model, synthetic_batch

__all__ = ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp2m")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    bagua.init_process_group()
    rank = bagua.get_rank()
    topology = "ring" if bagua.get_world_size() % 2 == 0 else "complete"
    x, y = synthetic_batch(args.model, 32, rank)
    wrapped = DecentralizedDataParallel(build_model(args.model), optim_fn_for(torch.optim.SGD, lr=0.01, momentum=0.9),
                                        topology=topology)
    net = build_model(args.model)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    plugin = net.with_bagua([optimizer], {"name": "decentralized_dp", "topology": topology})

    def wrapper_step() -> None:
        F.cross_entropy(wrapped(x), y).backward()

    def with_bagua_step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(plugin(x), y).backward()
        optimizer.step()

    forms = {"wrapper": wrapper_step, "with_bagua": with_bagua_step}
    for step in forms.values():
        for _ in range(5):
            step()
    times: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(args.blocks):
        for name, step in forms.items():
            dist.barrier()
            started = time.perf_counter()
            for _ in range(args.steps):
                step()
            dist.barrier()
            times[name].append((time.perf_counter() - started) / args.steps * 1000)
    if rank == 0:
        medians = {name: round(statistics.median(values), 3) for name, values in times.items()}
        print("RESULT", bagua.__file__, json.dumps(medians))


if __name__ == "__main__":
    main()
