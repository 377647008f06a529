"""End-to-end benchmark: the same model trained with torch DDP (plain, fp16 hook, PowerSGD) and every
installed bagua algorithm, on hosts emulated with network namespaces joined by a rate-limited link.

    sudo python -m benchmarks.e2e                       # the full run (make bench), ~15 min
    python -m benchmarks.e2e --loopback --model tiny --steps 2 --networks loopback   # no root

Writes ``results/e2e.md`` (tables), ``results/e2e.json`` (every number) and ``results/e2e.png``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.e2e_worker import codec_backend
from benchmarks.launch import REPO_ROOT, LaunchError, launch, on_network
from benchmarks.methods import available_methods
from benchmarks.report import write_e2e

__all__ = ["NETWORKS", "merge_rounds", "run_network", "main"]

NETWORKS: dict[str, dict] = {
    "1gbit": {"rate": "1gbit", "delay": "0ms"},
    "10gbit": {"rate": "10gbit", "delay": "0ms"},
    "1gbit+5ms": {"rate": "1gbit", "delay": "5ms"},
    # the framework's own overhead: a model with almost nothing to compute or send
    "tiny@10gbit": {"rate": "10gbit", "delay": "0ms", "model": "tiny", "warmup": 20, "steps": 300},
    "loopback": {},
}
DEFAULT_NETWORKS = "1gbit,10gbit,1gbit+5ms,tiny@10gbit"


def _last_line(exc: Exception) -> str:
    """The most telling line of a failed job's output: a hang report, else the last error, else the last line."""
    lines = [line for line in str(exc).splitlines() if line.strip() and not line.startswith("---")]
    for marker in ("HANG", "Error"):
        found = [line for line in lines if marker in line]
        if found:
            return found[-1].strip()
    return lines[-1] if lines else repr(exc)


def _record(rows: list[dict], row: dict, network: str) -> None:
    row["network"] = network
    rows.append(row)
    shown = f"{row['ms_per_step']:.1f} ms/step" if "ms_per_step" in row else "FAILED " + row["error"]
    print(f"[{network}] {row['method']:>28}: {shown}", flush=True)


def merge_rounds(rows: list[dict], methods: list[str]) -> list[dict]:
    """One row per method from the rows of several rounds (each a pass over every method): the median
    ms/step, bytes and samples/s; ``rounds_ms`` (every round's ms/step); ``ratio_ddp`` (the median of the
    per-round ratios to DDP's ms/step of the same round) with ``ratio_ddp_range``; ``failed_rounds`` (round
    and error) where some rounds failed and others ran. One round: unchanged."""
    if all(r.get("round", 0) == 0 for r in rows):
        return rows
    ddp = {r["round"]: r["ms_per_step"] for r in rows if r["method"] == "ddp" and "ms_per_step" in r}
    merged = []
    for method in methods:
        group = [r for r in rows if r["method"] == method]
        good = sorted((r for r in group if "ms_per_step" in r), key=lambda r: r["ms_per_step"])
        if not good:
            merged += group[:1]
            continue
        row = dict(good[(len(good) - 1) // 2])  # the median round (the lower one of an even count)
        row["rounds_ms"] = [r["ms_per_step"] for r in sorted(good, key=lambda r: r["round"])]
        failed = [{"round": r.get("round"), "error": r.get("error", "")} for r in group if "ms_per_step" not in r]
        if failed:  # the median is of the rounds that ran: say which did not
            row["failed_rounds"] = failed
        row["tx_bytes_per_step"] = statistics.median(r["tx_bytes_per_step"] for r in good)
        if all("cpu_ms_per_step" in r for r in good):
            row["cpu_ms_per_step"] = statistics.median(r["cpu_ms_per_step"] for r in good)
        ratios = sorted(r["ms_per_step"] / ddp[r["round"]] for r in good if r["round"] in ddp)
        if ratios:
            row["ratio_ddp"], row["ratio_ddp_range"] = statistics.median(ratios), (ratios[0], ratios[-1])
        merged.append(row)
    return merged


def warn_unless_native(codecs: str, who: str) -> None:
    """Say on stderr, before anything is measured, that the codecs run on their Python fallback."""
    if codecs != "native":
        print(f"{who}: WARNING: the codecs run on their Python fallback ({codecs}); bytegrad, qadam and the "
              "low-precision ring then spend 2-3x their CPU per step. Build native/ first: pip install -e .",
              file=sys.stderr, flush=True)


def run_network(network: str, methods: list[str], args: argparse.Namespace,
                hung: dict[str, str] | None = None, spec: dict | None = None) -> list[dict]:
    """Every method on one network (``args.rounds`` times, round-robin); a failed method gets a row with
    its error. ``hung`` (method -> network) collects the methods that hung; they are skipped on later
    networks. ``spec``: the network (default ``NETWORKS[network]``); ``args.ranks_per_host`` (default 1)
    ranks share each emulated host."""
    hung = {} if hung is None else hung
    spec = NETWORKS[network] if spec is None else spec
    ranks_per_host = getattr(args, "ranks_per_host", 1)
    model = spec.get("model", args.model)
    warmup, steps = spec.get("warmup", args.warmup), spec.get("steps", args.steps)
    rounds = getattr(args, "rounds", 1)
    rows: list[dict] = []

    def run_all(hosts: list[str] | None) -> None:
        for method in methods:
            if method in hung:
                _record(rows, {"method": method, "error": f"skipped: hung on {hung[method]}"}, network)
        for k in range(rounds):  # a job per round: the methods one after another, round-robin over rounds
            # (one job for every round grew each rank's memory with every method run, to 1.6 GB by the 30th,
            # and 16 ranks ran out of this machine's 24 GB: memory freed into the threads' malloc arenas and
            # kept there; with MALLOC_ARENA_MAX=2 the growth stops)
            run_round([(k, m) for m in methods if m not in hung], hosts)

    def run_round(remaining: list[tuple[int, str]], hosts: list[str] | None) -> None:
        while remaining:  # one job runs every method; after a failure, a new job runs the rest
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "rows.jsonl"
                worker_args = ["--methods", ",".join(m for _, m in remaining), "--model", model,
                               "--batch-size", str(args.batch_size), "--warmup", str(warmup), "--steps", str(steps),
                               "--iface", "eth0" if hosts else "lo", "--out", str(out)]
                error = None
                worker_args += ["--method-timeout", str(args.timeout)]
                if getattr(args, "probe_steps", 0):  # the compute as the ranks get it, before each method
                    worker_args += ["--probe-steps", str(args.probe_steps)]
                try:
                    launch("benchmarks.e2e_worker", worker_args, args.world_size, hosts=hosts,
                           timeout=args.timeout * len(remaining) + 60, ranks_per_host=ranks_per_host)
                except LaunchError as exc:
                    error = exc
                done = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
            for (k, _), row in zip(remaining, done):
                if hosts is not None and getattr(hosts, "link", ""):
                    row["link"] = hosts.link
                row["round"] = k
                _record(rows, row, network)
            remaining = remaining[len(done):]
            if error is not None and remaining:
                (k, method), message = remaining[0], _last_line(error)
                _record(rows, {"method": method, "error": message, "log": str(error), "round": k}, network)
                if "HANG" in str(error):  # do not wait for it again, in later rounds or on the next networks
                    hung[method] = network
                    remaining = [(j, m) for j, m in remaining if m != method]
                else:
                    remaining = remaining[1:]

    reason = on_network(spec, args.world_size // ranks_per_host, args.loopback, run_all)
    if reason is not None:  # the network did not come up
        for method in methods:
            if not any(row["method"] == method for row in rows):
                _record(rows, {"method": method, "error": f"network emulation failed: {reason}"}, network)
    rows.sort(key=lambda row: methods.index(row["method"]) if row["method"] in methods else len(methods))
    return merge_rounds(rows, methods)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default=DEFAULT_NETWORKS, help=f"comma list of {sorted(NETWORKS)}")
    parser.add_argument("--methods", default="all", help="comma list, or 'all' (DDP baselines + every algorithm)")
    parser.add_argument("--model", default="mlp21m")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every method this many times, round-robin, and report medians and ranges")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=100.0, help="seconds per method before it is killed")
    parser.add_argument("--loopback", action="store_true", help="run every network on loopback (no root)")
    parser.add_argument("--results", default=str(REPO_ROOT / "results"))
    args = parser.parse_args(argv)
    methods = available_methods() if args.methods == "all" else args.methods.split(",")
    networks = args.networks.split(",")
    for network in networks:
        if network not in NETWORKS:
            parser.error(f"unknown network {network!r}; choose from {sorted(NETWORKS)}")
    codecs = codec_backend()
    warn_unless_native(codecs, "benchmarks.e2e")
    rows: list[dict] = []
    hung: dict[str, str] = {}
    results = Path(args.results)
    for network in networks:
        rows += run_network(network, methods, args, hung)
        write_e2e(rows, results, "(partial: the run is not finished)")
    header = (f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()} "
              f"({torch.get_num_threads()} torch threads here, 1 per worker), torch {torch.__version__}, "
              f"{args.world_size} workers, {args.warmup} warmup + {args.steps} timed steps (mlp21m)"
              f"{f', {args.rounds} rounds (medians; ranges over rounds)' if args.rounds > 1 else ''}, "
              f"codecs: {'native kernels' if codecs == 'native' else codecs}; "
              f"`python -m benchmarks.e2e {' '.join(sys.argv[1:] if argv is None else argv)}`.")
    for path in write_e2e(rows, results, header):
        print("wrote", path)
    return rows


if __name__ == "__main__":
    main()
