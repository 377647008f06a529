"""Figures (not a test): the time of diloco's and sparseloco's inner steps in fault-tolerant mode against fail-fast
mode, and the copies of the training state fault-tolerant mode takes per inner step.

Fail-fast: two ranks over gloo on this host. Fault-tolerant: two one-rank replicas on a torchft lighthouse in this
process (``min_replicas=2``, so they train together from the first step). Each rank trains an MLP of ``--layers``
Linear(``--width``, ``--width``) layers with AdamW on random batches of 32 for ``--steps`` steps, with
``{"name": <algorithm>, "inner_steps": H}``. A step during which the algorithm's rounds merged
(``rounds_completed()`` went up) is a merge step; a step right after one is a round's first step (in
fault-tolerant mode with ``commit="at_round"`` it takes the round's quorum and copy); the others are inner steps.
Per algorithm and mode it prints the median inner step, the median first step of a round, the mean step over the
whole run (wall time, and the training thread's CPU time, which the machine's other load moves less), and in
fault-tolerant mode the copies (``bagua_features.fault_tolerance.state.capture`` calls: the step's or
round's copy, and a heal's) and their bytes per inner step. The machine is shared: the figures move by several
percent between runs, so it runs each mode ``--repeats`` times, alternating, and prints every run.

    python -m tests.fault_tolerant_step_cost [--width 512 --layers 4 --steps 240 --inner-steps 8 --repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time


def _unique_bytes(tree, seen: set | None = None) -> int:
    """Bytes of the distinct tensors in ``tree`` (the copy shares one clone of a tensor it reached twice, e.g.
    diloco's ``local`` and the module's weights; ``tree_bytes`` counts it at each place)."""
    import torch

    seen = set() if seen is None else seen
    if isinstance(tree, torch.Tensor):
        if id(tree) in seen:
            return 0
        seen.add(id(tree))
        return tree.numel() * tree.element_size()
    if isinstance(tree, dict):
        return sum(_unique_bytes(v, seen) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(_unique_bytes(v, seen) for v in tree)
    return 0


def _train(rank: int, algorithm: dict, width: int, layers: int, steps: int) -> dict:
    import torch

    from bagua_features.fault_tolerance import state as ft_state

    copies = {"count": 0, "bytes": 0}
    capture = ft_state.capture

    def counted(*args, **kwargs):
        saved = capture(*args, **kwargs)
        copies["count"] += 1
        copies["bytes"] += _unique_bytes(saved)
        return saved

    ft_state.capture = counted  # the runtime calls ft_state.capture
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model = model.with_bagua([optimizer], algorithm)
    impl = model.bagua_algorithm
    generator = torch.Generator().manual_seed(rank)
    batches = [torch.randn(32, width, generator=generator) for _ in range(8)]
    kinds, times, cpu_times = [], [], []
    merged_before = False
    for step in range(steps):
        impl = model.bagua_algorithm  # (fault-tolerant mode reifies it again on a new quorum)
        rounds = impl.rounds_completed()
        before = rounds.rounds if rounds is not None else 0
        copies_before = copies["count"]
        started, cpu = time.perf_counter(), time.thread_time()
        optimizer.zero_grad()
        model(batches[step % len(batches)]).square().mean().backward()
        optimizer.step()
        took, cpu = time.perf_counter() - started, time.thread_time() - cpu
        impl = model.bagua_algorithm
        rounds = impl.rounds_completed()
        merged = (rounds.rounds if rounds is not None else 0) > before
        kind = "merge" if merged else ("first" if merged_before else "inner")
        if copies["count"] > copies_before and kind == "inner" and step > 0:
            kind = "inner+copy"
        kinds.append(kind)
        times.append(took)
        cpu_times.append(cpu)
        merged_before = merged
    skip = 2 * algorithm.get("inner_steps", 1)  # the first rounds warm up
    inner = [t for k, t in zip(kinds[skip:], times[skip:]) if k in ("inner", "inner+copy")]
    inner_cpu = [t for k, t in zip(kinds[skip:], cpu_times[skip:]) if k in ("inner", "inner+copy")]
    first = [t for k, t in zip(kinds[skip:], times[skip:]) if k == "first"]
    inner_steps = sum(1 for k in kinds if k in ("inner", "inner+copy"))
    return {"inner_ms": statistics.median(inner) * 1e3, "inner_cpu_ms": statistics.median(inner_cpu) * 1e3,
            "mean_cpu_ms": statistics.fmean(cpu_times[skip:]) * 1e3, "first_of_round_ms": statistics.median(first) * 1e3
            if first else None, "mean_step_ms": statistics.fmean(times[skip:]) * 1e3,
            "copies": copies["count"], "copied_mb": copies["bytes"] / 1e6, "steps": steps,
            "inner_steps": inner_steps,
            "copies_on_inner_steps": sum(1 for k in kinds if k == "inner+copy"),
            "params": sum(p.numel() for p in model.parameters())}


def _fail_fast(algorithm: dict, args: argparse.Namespace) -> list[dict]:
    from tests.distributed import run_workers

    return run_workers(_train, 2, algorithm, args.width, args.layers, args.steps, timeout=600)


def _fault_tolerant(algorithm: dict, args: argparse.Namespace) -> list[dict]:
    from torchft.coordination import LighthouseServer

    from tests.distributed import run_workers

    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=60_000, heartbeat_timeout_ms=5_000)
    address = f"http://127.0.0.1:{lighthouse.address().rsplit(':', 1)[1]}"
    results: list = [None, None]

    def replica(index: int) -> None:
        env = {"TORCHFT_LIGHTHOUSE": address, "BAGUA_FAULT_TOLERANT": "1", "BAGUA_FT_REPLICA_ID": f"r{index}",
               "BAGUA_FT_MIN_REPLICAS": "2", "BAGUA_FT_TIMEOUT_S": "60", "BAGUA_FT_HANG_TIMEOUT_S": "120",
               "RUST_LOG": "warn"}
        try:
            results[index] = run_workers(_train, 1, algorithm, args.width, args.layers, args.steps, timeout=600,
                                         env=env)[0]
        except BaseException as exc:  # reported below
            results[index] = exc

    try:
        threads = [threading.Thread(target=replica, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        lighthouse.shutdown()
    for index, result in enumerate(results):
        if isinstance(result, BaseException):
            raise RuntimeError(f"replica r{index} failed: {result}") from result
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--inner-steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--algorithms", default="diloco,sparseloco")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    report: dict = {}
    for name in args.algorithms.split(","):
        algorithm = {"name": name, "inner_steps": args.inner_steps}
        runs: dict[str, list] = {"fail-fast": [], "fault-tolerant": []}
        for _ in range(args.repeats):
            runs["fail-fast"].append(_fail_fast(algorithm, args))
            runs["fault-tolerant"].append(_fault_tolerant(algorithm, args))
        summary = {}
        for mode, results in runs.items():
            per_rank = [r for run in results for r in run]
            summary[mode] = {
                "inner_ms (median over runs and ranks)": round(statistics.median(r["inner_ms"] for r in per_rank), 3),
                "mean_step_ms": round(statistics.median(r["mean_step_ms"] for r in per_rank), 3),
                "inner_cpu_ms": round(statistics.median(r["inner_cpu_ms"] for r in per_rank), 3),
                "mean_cpu_ms": round(statistics.median(r["mean_cpu_ms"] for r in per_rank), 3),
                "first_of_round_ms": round(statistics.median(r["first_of_round_ms"] for r in per_rank
                                                             if r["first_of_round_ms"] is not None), 3),
                "copies per inner step": round(statistics.fmean(r["copies_on_inner_steps"] / r["inner_steps"]
                                                                for r in per_rank), 3),
                "copies per step": round(statistics.fmean(r["copies"] / r["steps"] for r in per_rank), 3),
                "copied MB per step": round(statistics.fmean(r["copied_mb"] / r["steps"] for r in per_rank), 3),
                "runs": [[{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in run]
                         for run in results],
            }
        ratio = summary["fault-tolerant"]["inner_ms (median over runs and ranks)"] / \
            summary["fail-fast"]["inner_ms (median over runs and ranks)"]
        summary["inner step, fault-tolerant / fail-fast"] = round(ratio, 3)
        summary["inner step CPU, fault-tolerant / fail-fast"] = round(
            summary["fault-tolerant"]["inner_cpu_ms"] / summary["fail-fast"]["inner_cpu_ms"], 3)
        summary["mean step, fault-tolerant / fail-fast"] = round(
            summary["fault-tolerant"]["mean_step_ms"] / summary["fail-fast"]["mean_step_ms"], 3)
        report[name] = summary
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
