"""How much slower one rank's training step runs when ``k`` ranks share this machine's cores.

The emulated hosts of ``benchmarks.scale`` are network namespaces on one machine: 16 ranks share its 2
cores. Dividing the cores evenly (one rank's step times ``k / cores``) misses what sharing costs beyond
that (context switches, caches and memory bandwidth shared by more processes), so the cost model takes
the slowdown measured: ``k`` processes each run forward, backward and an SGD step of the benchmark's model
on their own (no communication, one thread each, as the benchmark's ranks do) over a common window, and
the factor is their mean time per step over one process's alone. The processes are started once, warmed
up, and the same ones run every ``k`` in turn; each ``k`` is measured ``repeats`` times (the median is kept).
The same loop's CPU time per step with one process alone (:func:`measure_steps`) is the compute the cost
model multiplies by these factors: the factors are ratios of this loop, so they apply to it.

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
from dataclasses import dataclass

__all__ = ["Contention", "measure", "measure_steps", "main"]

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
        ends: list[tuple[float, float]] = []  # (wall, this process's CPU) at the end of each step
        # (past the window's end until two steps have ended in it: on a loaded machine a short window may hold
        # fewer, and a window of no step has no time per step)
        while (now := time.monotonic()) < stop or len(ends) < 2:
            step()
            now = time.monotonic()
            if now >= start and (now <= stop or len(ends) < 2):
                ends.append((now, time.process_time()))
        steps = len(ends) - 1
        per_step = (ends[-1][0] - ends[0][0]) / steps if steps > 0 else float("nan")
        cpu_per_step = (ends[-1][1] - ends[0][1]) / steps if steps > 0 else float("nan")
        results.put(("window", index, (per_step, cpu_per_step)))


@dataclass(frozen=True)
class Contention:
    """What :func:`measure_steps` saw: ``factors`` ``{k: slowdown}`` and ``alone_cpu_s``, the CPU seconds per
    step of the smallest ``k`` (one process alone when ``ranks`` holds 1)."""

    factors: dict[int, float]
    alone_cpu_s: float


def measure(model: str, batch_size: int, ranks: Sequence[int], window_s: float = 3.0, repeats: int = 3,
            timeout_s: float = 300.0) -> dict[int, float]:
    """``{k: slowdown}``: each process's mean time per step when ``k`` run at once, over one alone's
    (``ranks`` must hold 1 or the factors are relative to its smallest entry). Raises ``RuntimeError``
    naming the process that did not answer within ``timeout_s``."""
    return measure_steps(model, batch_size, ranks, window_s, repeats, timeout_s).factors


def measure_steps(model: str, batch_size: int, ranks: Sequence[int], window_s: float = 3.0, repeats: int = 3,
                  timeout_s: float = 300.0) -> Contention:
    """The slowdowns of :func:`measure` and, from the same processes, the CPU time per step of the smallest
    ``k`` (median over ``repeats``)."""
    ranks = sorted(set(ranks))
    ctx = mp.get_context("spawn")
    results: mp.Queue = ctx.Queue()
    queues = [ctx.Queue() for _ in range(ranks[-1])]
    procs = [ctx.Process(target=_worker, args=(i, model, batch_size, q, results), daemon=True)
             for i, q in enumerate(queues)]
    for p in procs:
        p.start()

    def collect(count: int, what: str) -> list:
        got: list = []
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
        alone_cpu: list[float] = []
        for k in ranks:
            rounds = []
            for _ in range(repeats):
                start = time.monotonic() + _LEAD_S
                for q in queues[:k]:
                    q.put((start, start + window_s))
                windows = collect(k, "window")
                rounds.append(statistics.fmean(wall for wall, _ in windows))
                if k == ranks[0]:
                    alone_cpu.append(statistics.fmean(cpu for _, cpu in windows))
            per_k[k] = statistics.median(rounds)
    finally:
        for q in queues:
            q.put(None)
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    base = per_k[ranks[0]]
    return Contention({k: round(t / base, 3) for k, t in per_k.items()}, statistics.median(alone_cpu))


def main(argv: list[str] | None = None) -> Contention:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp5m")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--ranks", default="1,2,4,8,16", help="comma list of process counts (include 1)")
    parser.add_argument("--window", type=float, default=3.0, help="seconds each measurement runs")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    got = measure_steps(args.model, args.batch_size, [int(k) for k in args.ranks.split(",")], args.window,
                        args.repeats)
    print(f"one process alone: {got.alone_cpu_s * 1e3:.1f} ms of CPU per step")
    for k, factor in got.factors.items():
        print(f"{k:3d} processes: {factor:.2f}x one alone's step")
    return got


if __name__ == "__main__":
    main()
