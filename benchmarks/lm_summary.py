"""The LM benchmark's figures from its curves: time and samples to a target loss, the zero-communication limit,
and the median and spread over seeds.

Crossings are interpolated linearly between the two evaluations around the target. Synchronous training (DDP;
torch's HSDP when sharded: the *baseline*) computes the same updates on every network and at every host speed
(same weights, batches and arithmetic), so its samples to the target are taken, per seed, from whichever
network it reached the target on with as many ranks, and their median over the seeds is the job's.

**The zero-communication limit** of a network (and host speeds): the baseline's samples to the target over
the summed throughput (samples per second) of the hosts training without communication (the ``alone``
method, each host's own samples over its own training clock). At equal speeds that is the baseline's steps to
the target at ``alone``'s step time. A method's *share of the limit* is the limit's seconds over its own; it
beats the limit (a share above 1) only by converging faster per sample than synchronous training. With one
host slowed (``--slow-host``) the same formula gives the heterogeneous limit: the fast hosts' samples count in
full.

Where the baseline's budget ran out before the target, its speedup is a measured lower bound (``>``) and an
estimate is added: the baseline's steps to the target times its measured seconds per step here.

Example::

    >>> groups = summarize(rows, target=2.55)          # one dict per (network, speeds, method)
    >>> groups[0]["seconds_to_target"], groups[0]["seconds_range"], groups[0]["of_limit"]
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["crossing", "loss_at", "host_throughputs", "summarize", "group_key"]


def crossing(curve: Sequence[dict], target: float, key: str) -> float | None:
    """``key`` ("seconds", "step" or "samples") where the validation loss first reaches ``target``, or None."""
    if curve and curve[0]["loss"] <= target:
        return float(curve[0][key])
    for a, b in zip(curve, curve[1:]):
        if a["loss"] > target >= b["loss"]:
            return a[key] + (a["loss"] - target) / (a["loss"] - b["loss"]) * (b[key] - a[key])
    return None


def loss_at(curve: Sequence[dict], seconds: float) -> float:
    """The validation loss at ``seconds`` of training, interpolated (the last one if the curve ends before)."""
    for a, b in zip(curve, curve[1:]):
        if a["seconds"] <= seconds <= b["seconds"] and b["seconds"] > a["seconds"]:
            return a["loss"] + (seconds - a["seconds"]) / (b["seconds"] - a["seconds"]) * (b["loss"] - a["loss"])
    return curve[-1]["loss"]


def _samples_curve(row: dict) -> list[dict]:
    """The curve with ``samples`` at every point (older rows: steps x world size x batch)."""
    per_step = row["world_size"] * row["batch_size"]
    return [p if "samples" in p else {**p, "samples": p["step"] * per_step} for p in row["curve"]]


def host_throughputs(row: dict) -> list[float]:
    """Each host's samples per second of its own training clock (its ranks' samples over its slowest clock)."""
    per_host = row.get("ranks_per_host", 1)
    steps, clocks = row.get("rank_steps"), row.get("rank_clocks")
    if not steps or not clocks:  # older rows: every rank took the curve's last step in the slowest clock
        last = row["curve"][-1]
        return [last["step"] * per_host * row["batch_size"] / max(last["seconds"], 1e-9)] * (row["world_size"] // per_host)
    return [sum(steps[h : h + per_host]) * row["batch_size"] / max(max(clocks[h : h + per_host]), 1e-9)
            for h in range(0, len(steps), per_host)]


def group_key(row: dict) -> tuple[str, tuple | None]:
    """(network, slow host) of a row: the rows measured under the same conditions."""
    slow = row.get("slow_host")
    return row["network"], None if slow is None else tuple(slow)


def _row(row: dict, target: float) -> dict:
    curve = _samples_curve(row)
    last = curve[-1]
    tx = row["tx_bytes"] / (row["world_size"] if row.get("iface") == "lo" else 1)
    return {**row, "curve": curve, "seconds_to_target": crossing(curve, target, "seconds"),
            "steps_to_target": crossing(curve, target, "step"), "samples_to_target": crossing(curve, target, "samples"),
            "loss_at_budget": loss_at(curve, row["budget_s"]), "steps_per_s": last["step"] / max(last["seconds"], 1e-9),
            "samples_per_s": last["samples"] / max(last["seconds"], 1e-9),
            "hosts_samples_per_s": sum(host_throughputs(row)), "mb_per_step": tx / max(row["steps"], 1) / 1e6,
            "exposed_s_per_step": row.get("exposed_s_per_step")}


def _median(values: Sequence[float | None]) -> float | None:
    """The median where an unreached target counts as the slowest (None when the median itself is unreached)."""
    ordered = sorted(values, key=lambda v: float("inf") if v is None else v)
    n = len(ordered)
    middle = ordered[(n - 1) // 2 : n // 2 + 1]
    return None if any(v is None for v in middle) else sum(middle) / len(middle)


def _spread(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    reached = [v for v in values if v is not None]
    return (min(reached) if reached else None, None if len(reached) < len(values) else max(reached))


def _baseline_samples(rows: Sequence[dict], baseline: str, world_size: int) -> float | None:
    """The baseline's samples to the target at ``world_size`` ranks: per seed the fewest over the networks it
    reached it on, then the median over the seeds."""
    per_seed: dict[int, float] = {}
    for r in rows:
        if r["method"] == baseline and r["world_size"] == world_size and r.get("samples_to_target") is not None:
            seed = r.get("seed", 0)
            per_seed[seed] = min(per_seed.get(seed, float("inf")), r["samples_to_target"])
    return statistics.median(per_seed.values()) if per_seed else None


def _aggregate(runs: list[dict]) -> dict[str, Any]:
    """One method under one condition over its seeds: medians, and the spread of the time to the target."""
    out = dict(runs[0])
    out["seeds"] = sorted(r.get("seed", 0) for r in runs)
    seconds = [r["seconds_to_target"] for r in runs]
    out["seconds_to_target"] = _median(seconds)
    out["seconds_range"] = _spread(seconds) if len(runs) > 1 else None
    out["reached"] = sum(s is not None for s in seconds)
    for key in ("steps_to_target", "samples_to_target"):
        out[key] = _median([r[key] for r in runs])
    for key in ("loss_at_budget", "steps_per_s", "samples_per_s", "hosts_samples_per_s", "mb_per_step",
                "held_bytes_per_rank", "exposed_s_per_step"):
        out[key] = statistics.median(r[key] for r in runs if r.get(key) is not None) if runs[0].get(key) is not None \
            else None
    losses = [r["loss_at_budget"] for r in runs]
    out["loss_range"] = (min(losses), max(losses)) if len(runs) > 1 else None
    out["runs"] = [{"seed": r.get("seed", 0), "seconds_to_target": r["seconds_to_target"],
                    "loss_at_budget": r["loss_at_budget"]} for r in runs]
    return out


def summarize(rows: Sequence[dict], target: float, baseline: str = "ddp") -> list[dict]:
    """One dict per (network, slow host, method) in the order first seen, aggregated over its seeds: seconds
    to the target (median, ``seconds_range``), samples, loss at the budget, steps/s, MB sent per step and
    rank; against ``baseline`` (the keys say ``ddp``) under the same conditions: ``speedup_vs_ddp`` and
    ``samples_vs_ddp``; ``limit_s`` and ``of_limit`` (module doc). A failed run gets its error row."""
    measured = [_row(r, target) for r in rows if "curve" in r]
    groups: dict[tuple, list[dict]] = {}
    out: list[dict] = []
    for row in rows:
        if "curve" not in row:
            out.append(dict(row))
    for row in measured:
        groups.setdefault((*group_key(row), row["method"]), []).append(row)
    aggregated = [_aggregate(runs) for runs in groups.values()]
    for condition in dict.fromkeys(group_key(r) for r in aggregated):
        group = [r for r in aggregated if group_key(r) == condition]
        base_samples = _baseline_samples(measured, baseline, group[0]["world_size"])
        ddp = next((r for r in group if r["method"] == baseline), None)
        alone = next((r for r in group if r["method"] == "alone"), None)
        limit = base_samples / alone["hosts_samples_per_s"] if base_samples and alone and alone["hosts_samples_per_s"] \
            else None
        base_steps = base_samples / (ddp["world_size"] * ddp["batch_size"]) if ddp and base_samples else None
        for r in group:
            r["limit_s"], r["baseline_samples"] = limit, base_samples
            seconds = r["seconds_to_target"]
            r["of_limit"] = None if limit is None or seconds is None else limit / max(seconds, 1e-9)
            r["samples_vs_ddp"] = None if r["samples_to_target"] is None or not base_samples else \
                r["samples_to_target"] / base_samples
            r["speedup_vs_ddp"], r["speedup_bound"] = None, ""
            if ddp is None or seconds is None:
                continue
            if ddp["seconds_to_target"] is not None:
                r["speedup_vs_ddp"] = ddp["seconds_to_target"] / max(seconds, 1e-9)
                continue
            # the baseline did not get there within its budget: a lower bound, and an estimate
            r["speedup_vs_ddp"], r["speedup_bound"] = ddp["curve"][-1]["seconds"] / max(seconds, 1e-9), ">"
            if base_steps:
                r["ddp_seconds_estimated"] = base_steps / ddp["steps_per_s"]
                r["speedup_vs_ddp_estimated"] = r["ddp_seconds_estimated"] / max(seconds, 1e-9)
        out.extend(group)
    return out
