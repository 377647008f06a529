"""One optimizer step side by side: ``torch.optim.Adam(foreach=True)`` against ``QAdamOptimizer`` in its
warmup (Adam) and after it (frozen second moment), on ResNet-50's parameter list (161 tensors, 25.6M
values), on the CPU and on CUDA when there is a GPU.

    python -m benchmarks.optimizer_step [--rounds 5] [--steps 20] [--devices cpu,cuda] [--json FILE]

Per optimizer and device it reports the median step time over ``rounds`` rounds of ``steps`` steps (the
optimizers alternate round by round, so the machine's noise hits all of them alike), the spread of the
rounds, the CPU time of the calling thread per step, and the aten operators dispatched per step (counted
with a ``TorchDispatchMode``: on a GPU each is a kernel launch). Gradients are fixed random tensors; no
model runs. The ratio column is each optimizer's step time over Adam(foreach)'s on the same device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["count_aten_ops", "main", "resnet50_shapes"]


def resnet50_shapes() -> list[tuple[int, ...]]:
    """The shapes of ResNet-50's trainable parameters, in registration order (torchvision's layout:
    bottleneck blocks [3, 4, 6, 3], expansion 4; every convolution followed by a batch norm)."""
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]
    width_in = 64
    for blocks, width, in ((3, 64), (4, 128), (6, 256), (3, 512)):
        for block in range(blocks):
            shapes += [(width, width_in, 1, 1), (width,), (width,),
                       (width, width, 3, 3), (width,), (width,),
                       (width * 4, width, 1, 1), (width * 4,), (width * 4,)]
            if block == 0:  # the downsample branch
                shapes += [(width * 4, width_in, 1, 1), (width * 4,), (width * 4,)]
            width_in = width * 4
    return shapes + [(1000, 2048), (1000,)]


class _Counter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_aten_ops(fn: Callable[[], object]) -> int:
    """The aten operators ``fn()`` dispatches (each a kernel launch on a GPU)."""
    with _Counter() as counter:
        fn()
    return counter.count


def _optimizers(device: torch.device, seed: int = 0) -> dict[str, torch.optim.Optimizer]:
    from bagua_algorithms.q_adam import QAdamOptimizer

    generator = torch.Generator().manual_seed(seed)
    shapes = resnet50_shapes()

    def params() -> list[torch.nn.Parameter]:
        made = [torch.nn.Parameter(torch.randn(s, generator=generator).to(device)) for s in shapes]
        for p in made:
            p.grad = torch.randn(p.shape, generator=generator).to(device) * 1e-2
        return made

    warmup = QAdamOptimizer(params(), lr=1e-3, warmup_steps=10**9)
    frozen = QAdamOptimizer(params(), lr=1e-3, warmup_steps=1)
    frozen.step()  # the one warmup step: v is frozen from now on
    return {"adam_foreach": torch.optim.Adam(params(), lr=1e-3, foreach=True),
            "qadam_warmup": warmup, "qadam_after_warmup": frozen}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(device: torch.device, rounds: int, steps: int) -> dict[str, dict[str, float]]:
    """Per optimizer: median step seconds, min/max over rounds, CPU seconds per step, aten ops per step."""
    optimizers = _optimizers(device)
    for optimizer in optimizers.values():  # first steps allocate state
        for _ in range(2):
            optimizer.step()
    _sync(device)
    times: dict[str, list[float]] = {name: [] for name in optimizers}
    cpu: dict[str, list[float]] = {name: [] for name in optimizers}
    for _ in range(rounds):
        for name, optimizer in optimizers.items():
            _sync(device)
            wall, thread = time.perf_counter(), time.thread_time()
            for _ in range(steps):
                optimizer.step()
            _sync(device)
            times[name].append((time.perf_counter() - wall) / steps)
            cpu[name].append((time.thread_time() - thread) / steps)
    out = {}
    for name, optimizer in optimizers.items():
        out[name] = {"step_s": statistics.median(times[name]), "min_s": min(times[name]), "max_s": max(times[name]),
                     "cpu_s": statistics.median(cpu[name]), "aten_ops": count_aten_ops(optimizer.step)}
    base = out["adam_foreach"]
    for row in out.values():
        row["ratio"] = row["step_s"] / base["step_s"]
        row["ops_ratio"] = row["aten_ops"] / base["aten_ops"]
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--devices", default="cpu,cuda", help="comma-separated; cuda is skipped without a GPU")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error(f"--rounds and --steps must be positive, got {args.rounds} and {args.steps}")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    report: dict[str, dict] = {}
    for name in args.devices.split(","):
        if name == "cuda" and not torch.cuda.is_available():
            print("cuda: no GPU here, skipped")
            continue
        device = torch.device(name)
        report[name] = measure(device, args.rounds, args.steps)
        print(f"{name} ({torch.cuda.get_device_name(device) if name == 'cuda' else 'CPU'}), "
              f"{len(resnet50_shapes())} tensors, {args.rounds} rounds x {args.steps} steps:")
        print(f"  {'optimizer':<20} {'step ms':>9} {'min-max ms':>15} {'cpu ms':>8} {'aten ops':>9} {'x Adam':>7} "
              f"{'ops x Adam':>10}")
        for opt, row in report[name].items():
            print(f"  {opt:<20} {row['step_s'] * 1e3:9.2f} {row['min_s'] * 1e3:7.2f}-{row['max_s'] * 1e3:<7.2f} "
                  f"{row['cpu_s'] * 1e3:8.2f} {row['aten_ops']:9d} {row['ratio']:7.2f} {row['ops_ratio']:10.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"torch": torch.__version__, "results": report}, fh, indent=2)
    return report


if __name__ == "__main__":
    main()
