"""Time to accuracy on a language model: a byte-level transformer (10.8M parameters) trained on the Python
standard library's sources by two emulated hosts, with torch DDP (plain, fp16 hook, PowerSGD hook) and
every installed bagua algorithm, over three links; each method gets the same wall-clock budget.

    sudo python -m benchmarks.lm                        # make bench-lm: the full run (see --help for its length)
    python -m benchmarks.lm --loopback --networks loopback --model lm-tiny --budget 3 --methods ddp,diloco

Reports, per network and method, the training seconds to reach ``--target`` validation loss (nats per
byte), how much sooner than DDP, the samples needed relative to DDP, and the validation loss when the
budget is spent: ``results/lm.md``, ``results/lm.json``, ``results/lm.png``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.e2e import _last_line
from benchmarks.launch import REPO_ROOT, LaunchError, launch, on_network
from benchmarks.lm_report import write_lm
from benchmarks.lm_worker import LM_METHOD_OPTIONS, SHARDED_BASELINES
from benchmarks.methods import available_methods

__all__ = ["NETWORKS", "lm_methods", "run_network", "main"]

NETWORKS: dict[str, dict] = {
    "100mbit+10ms": {"rate": "100mbit", "delay": "10ms", "budget": 300.0},
    "1gbit": {"rate": "1gbit", "delay": "0ms", "budget": 200.0},
    "10gbit": {"rate": "10gbit", "delay": "0ms", "budget": 200.0},
    "loopback": {"budget": 60.0},
}
DEFAULT_NETWORKS = "100mbit+10ms,1gbit,10gbit"
DEFAULT_TARGET = 2.55
"""Validation loss (nats per byte) to reach: DDP gets there after about 170 steps (1,400 sequences of 128
bytes), within its budget on the fast links of a 2-core machine."""


def lm_methods(sharded: bool = False) -> list[str]:
    """DDP baselines, every installed algorithm (with the options of ``LM_METHOD_OPTIONS``), and the
    variants listed there (streaming DiLoCo). ``sharded``: torch's HSDP, the zero-communication limit
    (``alone``) and the algorithms that support sharding, with their variants."""
    methods = available_methods()
    if sharded:
        from bagua_core.module.sharded import algorithms_supporting_sharding

        methods = list(SHARDED_BASELINES) + [m for m in algorithms_supporting_sharding() if m in methods]
    variants = [m for m, (name, _) in LM_METHOD_OPTIONS.items() if m not in methods and name in methods]
    return methods + variants


def run_network(network: str, methods: list[str], args: argparse.Namespace) -> list[dict]:
    """Every method on one network; a failed method gets a row with its error and the rest run on."""
    spec = NETWORKS[network]
    budget = args.budget or spec["budget"]
    rows: list[dict] = []

    def run_all(hosts) -> None:
        remaining = list(methods)
        while remaining:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "curves.jsonl"
                per_method = budget * 3 + 180
                worker_args = ["--methods", ",".join(remaining), "--model", args.model, "--batch-size",
                               str(args.batch_size), "--budget", str(budget), "--evals", str(args.evals),
                               "--corpus-bytes", str(args.corpus_bytes), "--iface", "eth0" if hosts else "lo",
                               "--out", str(out), "--method-timeout", str(per_method), "--variants", args.variants,
                               "--ranks-per-host", str(args.ranks_per_host)]
                error = None
                try:
                    launch("benchmarks.lm_worker", worker_args, args.world_size, hosts=hosts,
                           timeout=per_method * len(remaining) + 60, comm_timeout=max(300.0, budget),
                           ranks_per_host=args.ranks_per_host)
                except LaunchError as exc:
                    error = exc
                done = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
            for row in done:
                row.update(network=network, iface="eth0" if hosts else "lo", link=getattr(hosts, "link", "") or "",
                           hosts=args.world_size // args.ranks_per_host, ranks_per_host=args.ranks_per_host)
                last = row["curve"][-1]
                print(f"[{network}] {row['method']:>28}: loss {last['loss']:.3f} after {last['seconds']:.0f} s, "
                      f"{last['step']} steps", flush=True)
                rows.append(row)
            remaining = remaining[len(done):]
            if error is not None and remaining:
                print(f"[{network}] {remaining[0]:>28}: FAILED {_last_line(error)}", flush=True)
                rows.append({"method": remaining[0], "network": network, "error": _last_line(error), "log": str(error)})
                remaining = remaining[1:]

    reason = on_network(spec, args.world_size // args.ranks_per_host, args.loopback, run_all)
    if reason is not None:
        done = {r["method"] for r in rows}
        rows += [{"method": m, "network": network, "error": f"network emulation failed: {reason}"}
                 for m in methods if m not in done]
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default=DEFAULT_NETWORKS, help=f"comma list of {sorted(NETWORKS)}")
    parser.add_argument("--methods", default="all", help="comma list, or 'all'")
    parser.add_argument("--model", default="lm11m")
    parser.add_argument("--batch-size", type=int, default=4, help="sequences per rank and step")
    parser.add_argument("--budget", type=float, default=0.0, help="training seconds per method (default: per network)")
    parser.add_argument("--target", type=float, default=DEFAULT_TARGET, help="validation loss to reach")
    parser.add_argument("--evals", type=int, default=12)
    parser.add_argument("--corpus-bytes", type=int, default=0, help="cap the training split (smoke runs)")
    parser.add_argument("--world-size", type=int, default=2, help="ranks (with --ranks-per-host 1: hosts)")
    parser.add_argument("--ranks-per-host", type=int, default=1,
                        help="> 1: the sharded benchmark: FSDP2 over each host's ranks, methods between hosts, "
                             "against torch's HSDP and every host alone (results/lm_sharded.*)")
    parser.add_argument("--hosts", default="",
                        help="with --ranks-per-host: comma list of host counts, each a run (default: world size / "
                             "ranks per host)")
    parser.add_argument("--variants", default="{}",
                        help='JSON: more methods to run, {"label": ["algorithm or ddp baseline", {options}]}')
    parser.add_argument("--loopback", action="store_true", help="run every network on loopback (no root)")
    parser.add_argument("--results", default=str(REPO_ROOT / "results"))
    args = parser.parse_args(argv)
    LM_METHOD_OPTIONS.update({label: tuple(value) for label, value in json.loads(args.variants).items()})
    sharded = args.ranks_per_host > 1
    methods = lm_methods(sharded) if args.methods == "all" else args.methods.split(",")
    host_counts = [int(h) for h in args.hosts.split(",")] if args.hosts else [args.world_size // args.ranks_per_host]
    name, baseline = ("lm_sharded", "hsdp") if sharded else ("lm", "ddp")
    networks = args.networks.split(",")
    for network in networks:
        if network not in NETWORKS:
            parser.error(f"unknown network {network!r}; choose from {sorted(NETWORKS)}")
    budgets = {n: args.budget or NETWORKS[n]["budget"] for n in networks}
    print(f"{len(methods)} methods x {len(networks)} networks x {len(host_counts)} host counts; training budgets "
          f"{budgets} s per method; expect about "
          f"{sum(b * 1.15 + 40 for b in budgets.values()) * len(methods) * len(host_counts) / 60:.0f} minutes",
          flush=True)
    command = f"python -m benchmarks.lm {' '.join(sys.argv[1:] if argv is None else argv)}"
    started = time.time()
    rows: list[dict] = []
    results = Path(args.results)
    for hosts in host_counts:
        args.world_size = hosts * args.ranks_per_host
        for network in networks:
            found = run_network(network, methods, args)
            if sharded:  # one table per network and host count
                for row in found:
                    row["network"] = f"{network}, {hosts} hosts"
            rows += found
            write_lm(rows, args.target, results, "(partial: the run is not finished)", name, baseline)
    workers = (f"{'/'.join(str(h) for h in host_counts)} hosts x {args.ranks_per_host} workers" if sharded
               else f"{args.world_size} workers")
    header = (f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()}, torch {torch.__version__}, "
              f"{workers} (one thread each), AdamW lr 1e-3 (20 warmup steps) for every method but "
              f"qadam (QAdamOptimizer lr 1e-3); target validation loss {args.target} nats/byte; the whole run took "
              f"{(time.time() - started) / 60:.0f} min; `{command}`.")
    for path in write_lm(rows, args.target, results, header, name, baseline):
        print("wrote", path)
    return rows


if __name__ == "__main__":
    main()
