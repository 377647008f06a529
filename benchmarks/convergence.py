"""Convergence benchmark: training loss and test accuracy against wall-clock time for torch DDP and every
installed bagua algorithm, on the main job's data (the shipped digits set, ``bagua train``'s MLP).

    python -m benchmarks.convergence                         # make bench-convergence (netns 1gbit, root)
    python -m benchmarks.convergence --network loopback --epochs 1 --methods ddp,gradient_allreduce

Writes ``results/convergence.md``, ``convergence.json`` and (with matplotlib) ``convergence.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.launch import REPO_ROOT, LaunchError, launch, netns_link
from benchmarks.methods import available_methods
from benchmarks.report import write_convergence

__all__ = ["run_curves", "main"]


def run_curves(methods: list[str], args: argparse.Namespace, hosts: list[str] | None) -> list[dict]:
    """Every method's curve; after a failure a new job runs the rest (the failed one gets an error row)."""
    rows: list[dict] = []
    remaining = list(methods)
    while remaining:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "curves.jsonl"
            worker_args = ["--methods", ",".join(remaining), "--epochs", str(args.epochs),
                           "--batch-size", str(args.batch_size), "--lr", str(args.lr), "--out", str(out)]
            error = None
            try:
                launch("benchmarks.convergence_worker", worker_args, args.world_size, hosts=hosts,
                       timeout=args.timeout * len(remaining))
            except LaunchError as exc:
                error = exc
            done = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
        for row in done:
            last = row["curve"][-1]
            print(f"{row['method']:>28}: loss {last['loss']:.4f}, accuracy {last['test_accuracy']:.3f} "
                  f"after {last['seconds']:.1f} s", flush=True)
        rows += done
        remaining = remaining[len(done):]
        if error is not None and remaining:
            message = [line for line in str(error).splitlines() if line.strip()][-1]
            print(f"{remaining[0]:>28}: FAILED {message}", flush=True)
            rows.append({"method": remaining[0], "error": message, "log": str(error)})
            remaining = remaining[1:]
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="all", help="comma list, or 'all' (DDP + every algorithm)")
    parser.add_argument("--network", default="1gbit", help="loopback, or a netns link rate such as 1gbit")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per method before it is killed")
    parser.add_argument("--results", default=str(REPO_ROOT / "results"))
    args = parser.parse_args(argv)
    methods = [m for m in available_methods() if m not in ("ddp_fp16", "ddp_powersgd")] \
        if args.methods == "all" else args.methods.split(",")
    if args.network == "loopback":
        rows = run_curves(methods, args, None)
    else:
        with netns_link(args.world_size, args.network, "0ms") as hosts:
            rows = run_curves(methods, args, hosts)
    header = (f"Measured {time.strftime('%Y-%m-%d %H:%M')}: {args.world_size} workers on {args.network}, "
              f"{args.epochs} epochs of the digits data, batch {args.batch_size} per worker, SGD lr {args.lr} "
              f"momentum 0.9 (qadam: QAdamOptimizer lr 5e-3, eps 1e-4, 2 epochs of warmup); "
              f"`python -m benchmarks.convergence {' '.join(sys.argv[1:] if argv is None else argv)}`.")
    for path in write_convergence(rows, Path(args.results), header):
        print("wrote", path)
    return rows


if __name__ == "__main__":
    main()
