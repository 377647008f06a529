"""Time to accuracy on a language model: a byte-level transformer (10.8M parameters) trained on the Python
standard library's sources by two emulated hosts, with torch DDP (plain, fp16 hook, PowerSGD hook), the
field's DiLoCo (torchft 0.2.0's DiLoCo and Streaming DiLoCo: :mod:`benchmarks.lm_torchft`), every host alone
(``alone``) and every installed bagua algorithm, over emulated links; each method gets the same wall-clock
budget.

    sudo make bench-lm                                  # the full runs: see the Makefile's bench-lm* targets
    python -m benchmarks.lm --loopback --networks loopback --model lm-tiny --budget 3 --methods ddp,diloco

Reports, per network and method, the training seconds to reach ``--target`` validation loss (nats per
byte), how much sooner than DDP, the samples needed relative to DDP, the share of the zero-communication
limit (DDP's samples to the target at the throughput of the hosts training alone; :mod:`benchmarks.lm_summary`)
and the validation loss when the budget is spent: ``results/lm.md``, ``.json``, ``.png``.

``--seeds N`` runs every method with seeds 0..N-1 (initial weights and data order; the tables give the
median and the spread). ``--limit-network NET`` runs the baseline (DDP, or HSDP) on NET too, for its samples
to the target where the networks of the run are too slow for it to get there. ``--slow-host I:F`` runs
host I (from 0) at F of its speed (:mod:`benchmarks.slow_host` says how), each method beside its run at
equal speeds with the same pinning (``results/lm_slow_host.*``). ``--eval-after-merges`` evaluates
``diloco`` and ``sparseloco`` right after their merges, as their rounds bounded in time always are
(:mod:`benchmarks.lm_worker`).
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
from benchmarks.lm_worker import BASELINES, LM_METHOD_OPTIONS, PEERS, SHARDED_BASELINES
from benchmarks.methods import DDP_METHODS, available_methods
from benchmarks.slow_host import SlowHost

__all__ = ["NETWORKS", "lm_methods", "run_network", "main"]

NETWORKS: dict[str, dict] = {
    "10mbit+50ms": {"rate": "10mbit", "delay": "50ms", "budget": 300.0},  # internet-like: 10 Mbit/s, 100 ms RTT
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
    """DDP baselines, ``alone``, the peers (torchft's DiLoCo and Streaming DiLoCo), every installed algorithm
    (with the options of ``LM_METHOD_OPTIONS``) and the variants listed there whose algorithm is installed
    (streaming DiLoCo; ``sparseloco`` once registered). ``sharded``: torch's HSDP and ``alone`` instead of
    DDP, and of the algorithms those that support sharding."""
    algorithms = [m for m in available_methods() if m not in DDP_METHODS]
    if sharded:
        from bagua_core.module.sharded import algorithms_supporting_sharding

        algorithms = [m for m in algorithms_supporting_sharding() if m in algorithms]
    baselines = list(SHARDED_BASELINES) if sharded else list(DDP_METHODS) + list(BASELINES)
    peers = [m for m, (name, _) in LM_METHOD_OPTIONS.items() if name in PEERS]
    variants = [m for m, (name, _) in LM_METHOD_OPTIONS.items() if m not in algorithms and name in algorithms]
    return baselines + peers + algorithms + variants


def run_network(network: str, methods: list[str], args: argparse.Namespace, seed: int = 0,
                slow: SlowHost | None = None) -> list[dict]:
    """Every method on one network with one seed (and host speeds); a failed method gets a row with its error
    and the rest run on."""
    spec = NETWORKS[network]
    budget = args.budget or spec["budget"]
    rows: list[dict] = []
    tags = {"seed": seed, "slow_host": None if slow is None else [slow.host, slow.fraction]}

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
                               "--ranks-per-host", str(args.ranks_per_host), "--seed", str(seed)]
                if slow is not None:
                    worker_args += ["--slow-host", f"{slow.host}:{slow.fraction}"]
                if args.eval_after_merges:
                    worker_args.append("--eval-after-merges")
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
                print(f"[{network} seed {seed}{'' if slow is None else ', ' + slow.label()}] {row['method']:>28}: "
                      f"loss {last['loss']:.3f} after {last['seconds']:.0f} s, {last['step']} steps", flush=True)
                rows.append(row)
            remaining = remaining[len(done):]
            if error is not None and remaining:
                print(f"[{network} seed {seed}] {remaining[0]:>28}: FAILED {_last_line(error)}", flush=True)
                rows.append({"method": remaining[0], "network": network, "error": _last_line(error), "log": str(error),
                             **tags})
                remaining = remaining[1:]

    reason = on_network(spec, args.world_size // args.ranks_per_host, args.loopback, run_all)
    if reason is not None:
        done = {r["method"] for r in rows}
        rows += [{"method": m, "network": network, "error": f"network emulation failed: {reason}", **tags}
                 for m in methods if m not in done]
    return rows


def _parser() -> argparse.ArgumentParser:
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
                        help="comma list of host counts, each a run (default: world size / ranks per host)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="run every method with seeds 0..N-1 (initial weights, data order); tables show the "
                             "median and the spread")
    parser.add_argument("--limit-network", default="",
                        help="also run the baseline (ddp, or hsdp) on this network, for its samples to the target "
                             "(the zero-communication limit) where the run's networks are too slow for it")
    parser.add_argument("--slow-host", default="",
                        help="I:F: host I (from 0) at F of its speed (e.g. 1:0.5), beside a run at equal speeds "
                             "(benchmarks/slow_host.py); results/lm_slow_host.*")
    parser.add_argument("--eval-after-merges", action="store_true",
                        help="evaluate diloco and sparseloco with rounds of inner steps right after their merges (the "
                             "global weights), not mid-round (the average of the local weights); timed rounds are "
                             "evaluated after agreed merges, on the average of weights that also hold what each "
                             "replica trained since it sent the round")
    parser.add_argument("--name", default="", help="results file stem (default lm, lm_sharded, lm_slow_host, ...)")
    parser.add_argument("--variants", default="{}",
                        help='JSON: more methods to run, {"label": ["algorithm, ddp baseline or peer", {options}]}')
    parser.add_argument("--loopback", action="store_true", help="run every network on loopback (no root)")
    parser.add_argument("--results", default=str(REPO_ROOT / "results"))
    return parser


def main(argv: list[str] | None = None) -> list[dict]:
    parser = _parser()
    args = parser.parse_args(argv)
    LM_METHOD_OPTIONS.update({label: tuple(value) for label, value in json.loads(args.variants).items()})
    sharded = args.ranks_per_host > 1
    methods = lm_methods(sharded) if args.methods == "all" else args.methods.split(",")
    host_counts = [int(h) for h in args.hosts.split(",")] if args.hosts else [args.world_size // args.ranks_per_host]
    baseline = "hsdp" if sharded else "ddp"
    networks = args.networks.split(",")
    for network in networks + ([args.limit_network] if args.limit_network else []):
        if network not in NETWORKS:
            parser.error(f"unknown network {network!r}; choose from {sorted(NETWORKS)}")
    if args.seeds < 1:
        parser.error(f"--seeds must be a positive integer, got {args.seeds}")
    try:
        slow = SlowHost.parse(args.slow_host, min(host_counts)) if args.slow_host else None
    except ValueError as exc:
        parser.error(str(exc))
    speeds = [None] if slow is None else [SlowHost(slow.host, 1.0), slow]
    name = args.name or ("lm_sharded" if sharded else "lm") + ("_slow_host" if slow else "")
    budgets = {n: args.budget or NETWORKS[n]["budget"] for n in networks}
    runs = len(methods) * args.seeds * len(speeds) * len(host_counts)
    minutes = sum(b * 1.15 + 40 for b in budgets.values()) * runs / 60
    if args.limit_network:
        minutes += ((args.budget or NETWORKS[args.limit_network]["budget"]) * 1.15 + 40) * args.seeds * len(host_counts) / 60
    print(f"{len(methods)} methods x {len(networks)} networks x {args.seeds} seeds x {len(speeds)} host speeds x "
          f"{len(host_counts)} host counts; training budgets {budgets} s per method; expect about {minutes:.0f} minutes",
          flush=True)
    command = f"python -m benchmarks.lm {' '.join(sys.argv[1:] if argv is None else argv)}"
    started = time.time()
    rows: list[dict] = []
    results = Path(args.results)
    for hosts in host_counts:
        args.world_size = hosts * args.ranks_per_host
        plan = [(network, methods, speed) for network in networks for speed in speeds]
        if args.limit_network:
            plan.append((args.limit_network, [baseline], speeds[0]))
        for network, chosen, speed in plan:
            for seed in range(args.seeds):
                found = run_network(network, chosen, args, seed, speed)
                if len(host_counts) > 1 or sharded:  # one table per network and host count
                    for row in found:
                        row["network"] = f"{network}, {hosts} hosts"
                rows += found
                write_lm(rows, args.target, results, "(partial: the run is not finished)", name, baseline)
    workers = (f"{'/'.join(str(h) for h in host_counts)} hosts x {args.ranks_per_host} workers" if sharded
               else f"{'/'.join(str(h) for h in host_counts)} workers")
    header = (f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()}, torch {torch.__version__}, "
              f"{workers} (one thread each), AdamW lr 1e-3 (20 warmup steps) for every method but "
              f"qadam (QAdamOptimizer lr 1e-3); target validation loss {args.target} nats/byte; "
              f"{args.seeds} seed{'s' if args.seeds > 1 else ''}; the whole run took "
              f"{(time.time() - started) / 60:.0f} min; `{command}`.")
    for path in write_lm(rows, args.target, results, header, name, baseline):
        print("wrote", path)
    return rows


if __name__ == "__main__":
    main()
