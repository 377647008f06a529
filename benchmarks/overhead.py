"""Per-step overhead side by side: plain, torch DDP and bagua's gradient_allreduce, in one job, alternating
blocks of steps so that the machine's noise hits all of them alike. ``bagua_ring`` is bagua with the
small-message allreduce off (gloo's ring for every bucket, as DDP), which shows what that path is worth.

    bagua run --standalone --nproc_per_node=2 -m benchmarks.overhead [--blocks 15] [--steps 100] [--model tiny]

``--model resnet50_params``: a module holding ResNet-50's 161 parameter tensors (25.6M values) whose
forward is a weighted sum of them: its step is almost nothing but the per-tensor work (gradient hooks,
buckets, copies) that the issue measured on a GPU, here on the CPU.

Prints (rank 0), per kind, the median over blocks of the per-step wall time (slowest rank of each
block), the CPU time of the whole process per step (every thread: bagua's communication thread and
gloo's included), and the aten operators the training thread dispatches in one step (a
``TorchDispatchMode``; on a GPU each is a kernel launch); the ratios bagua/DDP and the ratio of the
overheads over the plain step, ``(bagua - plain) / (ddp - plain)``. ``--json FILE`` writes them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import bagua_core as bagua
from benchmarks.models import MODEL_LAYERS, build_model, synthetic_batch
from benchmarks.optimizer_step import count_aten_ops, resnet50_shapes

__all__ = ["main"]

KINDS = ("plain", "ddp", "bagua", "bagua_ring")


class ParameterBank(torch.nn.Module):
    """ResNet-50's parameters, and a forward that only weighs them: ``sum_i mean(p_i) * x``."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(shape, generator=generator) * 0.01) for shape in resnet50_shapes())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([p.mean() for p in self.weights]).sum() * x


def _model(name: str) -> torch.nn.Module:
    return ParameterBank() if name == "resnet50_params" else build_model(name, seed=0)


def _make(kind: str, name: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = _model(name)
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
    parser.add_argument("--model", default="tiny", choices=sorted(MODEL_LAYERS) + ["resnet50_params"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.blocks < 1 or args.steps < 1:
        parser.error(f"--blocks and --steps must be positive, got {args.blocks} and {args.steps}")
    torch.set_num_threads(1)
    bagua.init_process_group()
    runs = {kind: _make(kind, args.model) for kind in KINDS}
    bank = args.model == "resnet50_params"
    x, y = (torch.ones(()), None) if bank else synthetic_batch(args.model, 32, seed=bagua.get_rank())

    def step(kind: str) -> None:
        model, optimizer = runs[kind]
        optimizer.zero_grad()
        loss = model(x) if bank else F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    def steps(kind: str, n: int) -> None:
        for _ in range(n):
            step(kind)

    for kind in KINDS:
        steps(kind, 20)
    blocks: dict[str, list[float]] = {kind: [] for kind in KINDS}
    cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(args.blocks):
        for kind in KINDS:
            bagua.barrier()
            started, cpu_started = time.perf_counter(), time.process_time()
            steps(kind, args.steps)
            elapsed = torch.tensor([(time.perf_counter() - started) / args.steps * 1e6])
            cpu[kind].append((time.process_time() - cpu_started) / args.steps * 1e6)
            bagua.allreduce_inplace(elapsed, op=bagua.ReduceOp.MAX)
            blocks[kind].append(elapsed.item())
    median = {kind: statistics.median(values) for kind, values in blocks.items()}
    cpu_median = {kind: statistics.median(values) for kind, values in cpu.items()}
    ops = {kind: count_aten_ops(lambda kind=kind: step(kind)) for kind in KINDS}
    result = {
        "model": args.model,
        "us_per_step": median,
        "cpu_us_per_step": cpu_median,
        "aten_ops_per_step": ops,
        "bagua_cpu_over_ddp": cpu_median["bagua"] / cpu_median["ddp"],
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
