"""How much slower one rank's training step runs when ``k`` ranks share this machine's cores.

The emulated hosts of ``benchmarks.scale`` are network namespaces on one machine: 16 ranks share its 2
cores. Dividing the cores evenly (one rank's step times ``k / cores``) misses what sharing costs beyond
that (context switches, caches and memory bandwidth shared by more processes), so the cost model takes
the slowdown measured: ``k`` processes each run forward, backward and an SGD step of the benchmark's model
on their own (no communication, one thread each, as the benchmark's ranks do) over a common window, and
the factor is their mean time per step over one process's alone. The processes are started once, warmed
up, and the same ones run every ``k`` in turn; each ``k`` is measured ``repeats`` times (the median is kept).

    python -m benchmarks.cpu_contention --model mlp5m --ranks 1,2,4,8,16

Example::

    >>> factors = measure("tiny", batch_size=8, ranks=(1, 2), window_s=0.2, repeats=1)
    >>> sorted(factors) == [1, 2] and factors[1] == 1.0
    True
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Sequence

__all__ = ["measure", "main"]

_LEAD_S = 0.5
"""Seconds between sending a window to the processes and its start, so that every process computes
by the time it opens."""


def _worker(index: int, model_name: str, batch_size: int, commands: mp.Queue, results: mp.Queue) -> None:
    import torch
    import torch.nn.functional as F

    from benchmarks.models import build_model, synthetic_batch

    torch.set_num_threads(1)
    model = build_model(model_name, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = synthetic_batch(model_name, batch_size, seed=1 + index)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(3):
        step()
    results.put(("ready", index, 0.0))
    while (window := commands.get()) is not None:
        start, stop = window
        ends: list[float] = []
        while (now := time.monotonic()) < stop:
            step()
            now = time.monotonic()
            if start <= now <= stop:
                ends.append(now)
        per_step = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else float("nan")
        results.put(("window", index, per_step))


def measure(model: str, batch_size: int, ranks: Sequence[int], window_s: float = 3.0, repeats: int = 3,
            timeout_s: float = 300.0) -> dict[int, float]:
    """``{k: slowdown}``: each process's mean time per step when ``k`` run at once, over one alone's
    (``ranks`` must hold 1 or the factors are relative to its smallest entry). Raises ``RuntimeError``
    naming the process that did not answer within ``timeout_s``."""
    ranks = sorted(set(ranks))
    ctx = mp.get_context("spawn")
    results: mp.Queue = ctx.Queue()
    queues = [ctx.Queue() for _ in range(ranks[-1])]
    procs = [ctx.Process(target=_worker, args=(i, model, batch_size, q, results), daemon=True)
             for i, q in enumerate(queues)]
    for p in procs:
        p.start()

    def collect(count: int, what: str) -> list[float]:
        got: list[float] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count:
            try:
                kind, index, value = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # queue.Empty
                dead = [i for i, p in enumerate(procs) if not p.is_alive()]
                raise RuntimeError(f"benchmarks.cpu_contention: {count - len(got)} of {count} processes gave no "
                                   f"{what} within {timeout_s:.0f} s (exited: {dead or 'none'})") from None
            if kind == what:
                got.append(value)
        return got

    try:
        collect(len(procs), "ready")
        per_k: dict[int, float] = {}
        for k in ranks:
            rounds = []
            for _ in range(repeats):
                start = time.monotonic() + _LEAD_S
                for q in queues[:k]:
                    q.put((start, start + window_s))
                rounds.append(statistics.fmean(collect(k, "window")))
            per_k[k] = statistics.median(rounds)
    finally:
        for q in queues:
            q.put(None)
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    base = per_k[ranks[0]]
    return {k: round(t / base, 3) for k, t in per_k.items()}


def main(argv: list[str] | None = None) -> dict[int, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp5m")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--ranks", default="1,2,4,8,16", help="comma list of process counts (include 1)")
    parser.add_argument("--window", type=float, default=3.0, help="seconds each measurement runs")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    factors = measure(args.model, args.batch_size, [int(k) for k in args.ranks.split(",")], args.window, args.repeats)
    for k, factor in factors.items():
        print(f"{k:3d} processes: {factor:.2f}x one alone's step")
    return factors


if __name__ == "__main__":
    main()
