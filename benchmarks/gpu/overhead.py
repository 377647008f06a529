"""Per-step overhead of ``with_bagua`` against torch DDP on one GPU (world size 1, NCCL).

One process trains three copies of the same model side by side: plain (no wrapper), torch DDP, and
bagua's gradient_allreduce; rounds of ``--steps`` steps alternate between them, so all see the same
clocks; the per-step time of a round is its CUDA-synchronised wall time over the steps. The model is
torchvision's ResNet-50 (fp32, channels-last, batch 64 of 224x224 images) when torchvision imports,
else a 6-layer transformer encoder. Goal (issue 17): bagua <= 1.05x DDP.

    python -m benchmarks.gpu.overhead [--model resnet50|transformer] [--rounds 7] [--steps 20] [--json f]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import bagua_core as bagua

__all__ = ["main"]


def _model_and_batch(kind: str, batch: int) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    if kind == "resnet50":
        import torchvision

        model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
        x = torch.randn(batch, 3, 224, 224, generator=gen).cuda().to(memory_format=torch.channels_last)
        return model, x, torch.randint(0, 1000, (batch,), generator=gen).cuda()
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 6), torch.nn.Flatten(), torch.nn.LazyLinear(10))
    x = torch.randn(batch, 128, 512, generator=gen).cuda()
    model = model.cuda()
    model(x)  # materialise the lazy layer
    return model, x, torch.randint(0, 10, (batch,), generator=gen).cuda()


def _round(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
           steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1000


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_model = "resnet50"
    try:
        import torchvision  # noqa: F401
    except Exception:
        default_model = "transformer"
    parser.add_argument("--model", choices=["resnet50", "transformer"], default=default_model)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", default=None)
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's top CPU ops of DDP and bagua")
    args = parser.parse_args(argv)
    for name, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                            MASTER_ADDR="127.0.0.1").items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("MASTER_PORT", "29731")
    bagua.init_process_group()
    runs = {}
    for method in ("plain", "ddp", "bagua"):
        torch.manual_seed(0)
        model, x, y = _model_and_batch(args.model, args.batch)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if method == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
        elif method == "bagua":
            model = model.with_bagua([optimizer], "gradient_allreduce")
        _round(model, optimizer, x, y, 5)  # warm-up: cuDNN autotuning, buckets, NCCL communicators
        runs[method] = (model, optimizer, x, y)
    times: dict[str, list[float]] = {method: [] for method in runs}
    for _ in range(args.rounds):
        for method, (model, optimizer, x, y) in runs.items():
            times[method].append(_round(model, optimizer, x, y, args.steps))
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "model": args.model,
              "batch": args.batch, "backend": str(dist.get_backend()), "ms_per_step": times}
    ddp = statistics.median(times["ddp"])
    print(f"{report['device']}, {args.model}, batch {args.batch}, backend {report['backend']}, "
          f"{args.rounds} rounds x {args.steps} steps")
    print("| method | ms/step (median) | min-max | vs DDP |\n| --- | ---: | ---: | ---: |")
    for method, values in times.items():
        median = statistics.median(values)
        print(f"| {method} | {median:.2f} | {min(values):.2f}-{max(values):.2f} | {median / ddp:.3f}x |")
    ratios = [b / d for b, d in zip(times["bagua"], times["ddp"])]
    print(f"bagua/DDP per round: {', '.join(f'{r:.3f}' for r in ratios)} (goal <= 1.05)")
    report["bagua_over_ddp_per_round"] = ratios
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    if args.profile:
        for method in ("ddp", "bagua"):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                _round(*runs[method], 10)
            print(f"--- {method}: top CPU time over 10 steps")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=50))
    runs["bagua"][0].bagua_shutdown()
    bagua.destroy_process_group()
    return report


if __name__ == "__main__":
    main()
