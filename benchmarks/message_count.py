"""What each rank sends per step, counted per process: does any message grow with the number of ranks?

Runs a method on loopback at several world sizes (no root needed) and, on every rank and for every
timed step, counts (a) the collectives bagua handed to torch (``bagua_core.runtime.communication.stats``:
calls and payload bytes per collective) and (b) what the process really wrote to and read from its
sockets (``/proc/self/io``: ``wchar``/``rchar`` bytes and ``syscw``/``syscr`` system calls, every thread
of the process: gloo's pairs, the store, the failure detector), so traffic that bagua does not record
(gloo's protocol, a store round trip, a barrier) shows too. Unlike an interface's counter, these are
per process, so other work on a shared machine does not enter them.

    python -m benchmarks.message_count --methods decentralized_shift_one --world-sizes 2,4,8

Prints one line per method and world size: per rank and step, the median over ranks of the bytes
written per step (each rank's total over the counted steps divided by their number: a message a step
leaves in flight, low_precision_decentralized's neighbour segments, is written during the next step, and
the last step's is drained into the count), the write calls, and bagua's collectives (name x calls /
payload MB, medians over ranks and steps), then the ratio of the bytes written at each size to the
smallest size's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

__all__ = ["proc_io", "main"]


def proc_io() -> dict[str, int]:
    """This process's I/O counters (``/proc/self/io``: every thread, sockets included)."""
    fields = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = int(value)
    return fields


def _worker(args: argparse.Namespace) -> None:
    """One rank: for each method, ``--warmup`` untimed steps, then ``--steps`` counted ones; rank 0
    appends one JSON line per method with every rank's per-step counts."""
    import torch
    import torch.distributed as dist

    import bagua_core as bagua
    from bagua_core.runtime.communication import stats
    from benchmarks.e2e_worker import _step, _drain
    from benchmarks.methods import finish, prepare
    from benchmarks.models import build_model, synthetic_batch

    torch.set_num_threads(1)
    bagua.init_process_group()
    try:
        for method in args.methods.split(","):
            rank = dist.get_rank()
            model, optimizer = prepare(method, build_model(args.model, seed=0), 0.01)
            x, y = synthetic_batch(args.model, args.batch_size, seed=1 + rank)
            for _ in range(args.warmup):
                _step(model, optimizer, x, y)
            dist.barrier()
            steps = []
            for _ in range(args.steps):
                stats.reset()
                before = proc_io()
                _step(model, optimizer, x, y)
                after = proc_io()
                steps.append({"io": {k: after[k] - before[k] for k in ("wchar", "rchar", "syscw", "syscr")},
                              "collectives": stats.snapshot()})
            before = proc_io()
            _drain(method, model)  # what the last step left in flight belongs to it
            after = proc_io()
            for key in steps[-1]["io"]:
                steps[-1]["io"][key] += after[key] - before[key]
            finish(method, model)
            gathered: list = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, steps)
            if rank == 0:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps({"method": method, "world_size": dist.get_world_size(),
                                         "ranks": gathered}) + "\n")
    finally:
        bagua.destroy_process_group()


def summarize(row: dict) -> dict:
    """One method at one world size: per-step means of each rank's I/O counts, their median over ranks;
    the collectives' medians over ranks and steps."""
    per_step = [step for rank in row["ranks"] for step in rank]

    def per_rank_mean(key: str) -> float:
        return statistics.median(sum(step["io"][key] for step in rank) / max(len(rank), 1) for rank in row["ranks"])

    collectives: dict[str, tuple[float, float]] = {}
    for name in sorted({n for step in per_step for n in step["collectives"]}):
        calls = [step["collectives"].get(name, {}).get("calls", 0) for step in per_step]
        nbytes = [step["collectives"].get(name, {}).get("bytes", 0) for step in per_step]
        collectives[name] = (statistics.median(calls), statistics.median(nbytes))
    return {"method": row["method"], "world_size": row["world_size"],
            "written": per_rank_mean("wchar"),
            "written_max": max(s["io"]["wchar"] for s in per_step),
            "writes": per_rank_mean("syscw"),
            "read": per_rank_mean("rchar"),
            "collectives": collectives}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="decentralized_shift_one,low_precision_decentralized,bytegrad")
    parser.add_argument("--world-sizes", default="2,4,8")
    parser.add_argument("--ranks-per-host", type=int, default=1, help="consecutive ranks counted as one node")
    parser.add_argument("--model", default="mlp5m")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return []
    from benchmarks.launch import launch

    summaries = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.jsonl"
        for n in (int(x) for x in args.world_sizes.split(",")):
            launch("benchmarks.message_count", ["--worker", "--out", str(out), "--methods", args.methods,
                                                "--model", args.model, "--batch-size", str(args.batch_size),
                                                "--warmup", str(args.warmup), "--steps", str(args.steps)],
                   n, timeout=args.timeout, ranks_per_host=args.ranks_per_host)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    summaries = [summarize(row) for row in rows]
    for method in dict.fromkeys(s["method"] for s in summaries):
        mine = [s for s in summaries if s["method"] == method]
        base = mine[0]["written"] or 1
        for s in mine:
            shown = ", ".join(f"{name} {calls:g} x / {nbytes / 1e6:.3f} MB" for name, (calls, nbytes) in s["collectives"].items())
            print(f"{method} n={s['world_size']}: written {s['written'] / 1e6:.3f} MB/step/rank "
                  f"({s['written'] / base:.3f}x n={mine[0]['world_size']}; max {s['written_max'] / 1e6:.3f}), "
                  f"{s['writes']:g} writes, read {s['read'] / 1e6:.3f} MB; bagua: {shown}", flush=True)
    return summaries


if __name__ == "__main__":
    main()
