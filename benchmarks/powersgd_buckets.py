"""PowerSGD with several buckets on gloo: torch's ``powerSGD_hook`` against bagua's ``powersgd``.

torch's hook issues its allreduces from future callbacks; with several buckets in flight on gloo those
run on different threads and their order differs between the ranks, which ends the job ("Received data
size doesn't match expected size") or hangs it. bagua's ``powersgd`` issues every bucket's allreduces
from one thread in bucket order. Each side runs in its own job (a failed job cannot go on), on the same
model, bucket size and PowerSGD settings, and the outcome is printed.

    python -m benchmarks.powersgd_buckets                     # loopback, 2 ranks, mlp21m, 25 MB buckets
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks.launch import LaunchError, launch

__all__ = ["main"]


def _worker(side: str, model_name: str, bucket_mb: int, steps: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import bagua_core as bagua
    from benchmarks.models import build_model, synthetic_batch

    torch.set_num_threads(1)
    os.environ["BAGUA_DEFAULT_BUCKET_SIZE"] = str(bucket_mb << 20)
    bagua.init_process_group()
    model = build_model(model_name, seed=0)
    if side == "torch":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
        state = powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        buckets = "DDP's"
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        model = model.with_bagua([optimizer], {"name": "powersgd", "start_iter": 2})
        buckets = len(model.bagua_buckets)
    x, y = synthetic_batch(model_name, 32, seed=dist.get_rank())
    started = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(f"{side}: {steps} steps with {buckets} buckets of {bucket_mb} MB, "
              f"{(time.perf_counter() - started) / steps * 1000:.0f} ms/step", flush=True)
    bagua.destroy_process_group()


def main(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp21m")
    parser.add_argument("--bucket-mb", type=int, default=25)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--side", choices=["torch", "bagua"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        _worker(args.side, args.model, args.bucket_mb, args.steps)
        return {}
    outcome = {}
    for side in ("torch", "bagua"):
        worker_args = ["--side", side, "--model", args.model, "--bucket-mb", str(args.bucket_mb),
                       "--steps", str(args.steps)]
        try:
            launch("benchmarks.powersgd_buckets", worker_args, 2, timeout=args.timeout, comm_timeout=60, echo=True)
            outcome[side] = "ran"
        except LaunchError as exc:
            lines = str(exc).splitlines()
            telling = ([line for line in lines if "what():" in line] or [line for line in lines if "Error" in line]
                       or lines[-1:])
            outcome[side] = "failed: " + telling[0].strip()[:300]
            print(f"{side}: {outcome[side]}", flush=True)
    return outcome


if __name__ == "__main__":
    main()
