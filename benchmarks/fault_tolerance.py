"""Training on while replicas fail: 3 replicas on emulated hosts at 1 Gbit/s (the lighthouse on a fourth), a
fault every K seconds for D seconds, in fault-tolerant mode (``bagua run --fault-tolerant --max-restarts``)
and, as the baseline, in fail-fast mode (``bagua run --nnodes 3 --max-restarts``, a checkpoint every M steps).
A fault is one of ``--faults`` (drawn at random with ``--seed``, else in turn), on a replica drawn the same way:

* ``kill``: SIGKILL of the replica's training process (not its launcher), which its launcher restarts;
* ``stop``: SIGSTOP of it, SIGCONT ``--stop-seconds`` later (a hung replica);
* ``partition``: its host's link down for ``--partition-seconds``, then up again.

    sudo python -m benchmarks.fault_tolerance                      # make bench-ft: kills, K = 60 and 15 s, D = 300 s
    python -m benchmarks.fault_tolerance --algorithms gradient_allreduce --intervals 15 --duration 60 \\
        --fault-free-duration 30 --baseline none                   # a short dev run (still root)
    python -m benchmarks.fault_tolerance --faults kill,stop,partition --seed 0 --intervals 15 --duration 600 \\
        --baseline none --modes ft                                 # chaos: 40 faults of the three kinds

Per algorithm and kill interval it measures:

* **efficiency**: the steps committed in the D seconds after the first step committed by all 3 replicas,
  over the steps a fault-free run commits in D seconds (the committed-step rate of a fault-free run of
  ``--fault-free-duration`` seconds right before it, measured the same way from its first 3-replica step,
  times D: the machine is shared, and its load moves the step time more than anything measured here);
  ``sample_efficiency`` weighs each committed step by its quorum's size (a step of 2 replicas trains on
  2/3 of the samples); ``absence_bound`` is the sample efficiency with no stall at all, the faulted replica
  alone missing from each stop's or partition's start to its end and from each kill to its replacement's first
  commit (:func:`absence_bound`): what the faults themselves cost;
* **kill to first commit**: from a kill to the restarted replica's first committed step, and from the
  restarted process's start (before its imports) to that step, split into launcher restart, imports,
  process group, wrapping and joining (quorum and heal); with ``--standby N`` the replacement is a warm standby
  (built before the kill), and its start is its activation;
* **bytes healed**: the tensor bytes of the state a restarted replica was healed with, per heal;
* **stall per fault kind**: the stalls (gaps between committed steps, :func:`stall_figures`) that begin
  after a fault and before the next, per kind of fault (median and total seconds);
* the **baseline**: the same schedule in fail-fast mode; its committed steps are the steps of progress
  kept (the step the training is at, and after a kill the last checkpoint's: steps redone after a restart
  count once), over the fail-fast fault-free rate.

Writes ``results/fault_tolerance.json`` (merged with the cells already there), ``.md`` (the table) and
``.png`` (committed steps over time, kills marked; skipped with a note without matplotlib). The pure parts
(schedule, analysis, report) are tested in ``tests/test_bench_fault_tolerance.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.launch import NETNS_PREFIX, netns_link

__all__ = ["ALGORITHMS", "FAULT_KINDS", "absence_bound", "kill_schedule", "fault_schedule", "stalls_by_fault",
           "inject_faults", "read_records", "ft_progress", "failfast_progress", "window_start",
           "analyse_run", "fault_free_rate", "markdown_table", "write_report", "main"]

REPO_ROOT = Path(__file__).resolve().parent.parent
ALGORITHMS: dict[str, dict[str, Any]] = {
    "gradient_allreduce": {"name": "gradient_allreduce"},
    "bytegrad": {"name": "bytegrad"},
    # streaming DiLoCo: 4 fragments, one synchronised every 5 inner steps, each exchange overlapped with 1 step
    "diloco_streaming": {"name": "diloco", "streaming": True, "inner_steps": 20, "fragments": 4},
    # rounds bounded in time (about 40 steps of mlp2m), merges weighted by the samples behind each replica
    "diloco_timed": {"name": "diloco", "round_seconds": 1.0},
    # rounds of 20 inner steps (about half a second of mlp2m), committed at the round (FaultTolerance "at_round")
    "diloco": {"name": "diloco", "inner_steps": 20},
    "sparseloco": {"name": "sparseloco", "inner_steps": 20},
    # the same, each round's exchange in flight during the next 4 inner steps
    "diloco_overlap": {"name": "diloco", "inner_steps": 20, "overlap_steps": 4},
    "sparseloco_overlap": {"name": "sparseloco", "inner_steps": 20, "overlap_steps": 4},
}
REPLICAS = 3
LIGHTHOUSE_HOST = REPLICAS + 1
"""The lighthouse's emulated host: one of its own (a partition of a replica's host leaves it reachable)."""
FAULT_KINDS = ("kill", "stop", "partition")
LIGHTHOUSE_PORT = 29510
RDZV_PORT = 29400


# --- pure parts -----------------------------------------------------------------------------------------
def kill_schedule(interval_s: float, duration_s: float, replicas: int = REPLICAS,
                  seed: int | None = None) -> list[tuple[float, int]]:
    """``(seconds after the start, replica index)`` of each kill: every ``interval_s`` seconds strictly inside
    ``duration_s``, the replica round-robin (0, 1, 2, 0, ...) or, with ``seed``, drawn at random (never the
    one killed just before, so that one kill lands on a replica that is up)."""
    if interval_s <= 0:
        return []
    kills, previous = [], -1
    rng = random.Random(seed)
    at, index = interval_s, 0
    while at < duration_s - 1e-9:
        if seed is None:
            victim = index % replicas
        else:
            victim = rng.choice([r for r in range(replicas) if r != previous] or [0])
        kills.append((round(at, 6), victim))
        previous, at, index = victim, at + interval_s, index + 1
    return kills


def fault_schedule(interval_s: float, duration_s: float, kinds: Sequence[str] = ("kill",), replicas: int = REPLICAS,
                   seed: int | None = None) -> list[tuple[float, int, str]]:
    """``(seconds after the start, replica index, kind)`` of each fault: the times and victims of
    :func:`kill_schedule`, the kind drawn from ``kinds`` at random with ``seed`` (its own stream: the same
    seed gives the same victims whatever the kinds), else in turn."""
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        raise ValueError(f"fault kinds must be some of {', '.join(FAULT_KINDS)}, got {list(kinds)}")
    rng = random.Random(None if seed is None else seed + 1)
    return [(at, victim, rng.choice(list(kinds)) if seed is not None else kinds[i % len(kinds)])
            for i, (at, victim) in enumerate(kill_schedule(interval_s, duration_s, replicas, seed))]


def read_records(path: Path) -> tuple[list[dict], list[dict]]:
    """The step records and the ``event: start`` records of a worker's ``.jsonl`` (a line cut by a kill is
    skipped)."""
    steps, starts = [], []
    if not path.exists():
        return steps, starts
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        (starts if record.get("event") == "start" else steps).append(record)
    return steps, starts


def window_start(records: dict[str, list[dict]], replicas: int = REPLICAS) -> float | None:
    """The time of the first step committed by a quorum of all ``replicas`` (the window's start), or None."""
    times = [r["t"] for rs in records.values() for r in rs if r.get("committed") and r.get("quorum", 0) >= replicas]
    return min(times) if times else None


def ft_progress(records: dict[str, list[dict]]) -> list[tuple[float, int]]:
    """The quorum's committed steps over time: ``(t, step)`` each time the highest committed step grows."""
    events = sorted((r["t"], r["step"]) for rs in records.values() for r in rs if r.get("committed"))
    curve, best = [], -1
    for t, step in events:
        if step > best:
            best = step
            curve.append((t, step))
    return curve


def failfast_progress(records: dict[str, list[dict]], kills: Sequence[dict]) -> list[tuple[float, int]]:
    """Steps of progress kept, over time, in fail-fast mode: the step the job is at; at a kill it falls back
    to the last checkpoint written before it (the steps after it are lost and are redone, counted once).
    Every worker restarts after a kill, so a record of a process seen before the kill and written after it
    (a step finishing as the kill lands) does not count."""
    events = sorted((r["t"], r["step"], bool(r.get("checkpoint")), r["pid"]) for rs in records.values() for r in rs)
    kill_times = sorted(k["t"] for k in kills if k.get("killed"))
    curve: list[tuple[float, int]] = []
    current = checkpoint = 0
    old: set[int] = set()  # pids of attempts a kill ended
    seen: set[int] = set()
    i = 0

    def kill(at: float) -> None:
        nonlocal current
        current = checkpoint
        old.update(seen)
        curve.append((at, current))

    for t, step, is_checkpoint, pid in events:
        while i < len(kill_times) and kill_times[i] < t:
            kill(kill_times[i])
            i += 1
        if pid in old:
            continue
        seen.add(pid)
        current = step
        if is_checkpoint:
            checkpoint = step
        if not curve or curve[-1][1] != current:
            curve.append((t, current))
    for at in kill_times[i:]:
        kill(at)
    return curve


def value_at(curve: Sequence[tuple[float, int]], t: float) -> int:
    """The curve's value at time ``t`` (its last point at or before ``t``; 0 before the first)."""
    value = 0
    for at, v in curve:
        if at > t:
            break
        value = v
    return value


def thin_curve(curve: Sequence[tuple[float, int]], min_dt: float = 0.25) -> list[tuple[float, int]]:
    """``curve`` with points at least ``min_dt`` apart (a point that falls, a kill's loss in fail-fast mode, and
    the last point are always kept): what the plot needs, in a file of a reasonable size."""
    kept: list[tuple[float, int]] = []
    for i, (t, v) in enumerate(curve):
        falls = bool(kept) and v < kept[-1][1]
        if not kept or falls or t - kept[-1][0] >= min_dt or i == len(curve) - 1:
            kept.append((t, v))
    return kept


def fault_free_rate(curve: Sequence[tuple[float, int]], t0: float, seconds: float) -> float:
    """Committed steps per second over ``[t0, t0 + seconds]``."""
    return (value_at(curve, t0 + seconds) - value_at(curve, t0)) / seconds


def stall_figures(records: dict[str, list[dict]], t0: float, duration_s: float) -> dict[str, Any]:
    """What the kills cost, read from the committed steps alone (so the machine's load, which changes the step
    time of the fault-free and the faulty runs differently, cancels): ``stall_s``, the time in the window
    between two consecutive committed steps beyond the median step (gaps of more than 0.5 s and 5 median
    steps: a failed step, the wait for a quorum, a collective waiting for its timeout), ``quorum_share``, the
    mean quorum size over the replicas, and ``load_free_efficiency = (1 - stall_s / D) x quorum_share``: the
    sample efficiency if a step took as long with 2 replicas as with 3 and the load never changed."""
    step, found, quorum = _stalls_in(records, t0, duration_s)
    if step is None:
        return {}
    stalls = [length for _, length in found]
    share = sum(quorum.values()) / (REPLICAS * len(quorum))
    stall = sum(stalls)
    return {"median_step_s": round(step, 4), "stalls": len(stalls), "stall_s": round(stall, 2),
            "max_stall_s": round(max(stalls), 2) if stalls else 0.0, "quorum_share": round(share, 4),
            "load_free_efficiency": round((1 - stall / duration_s) * share, 4)}


def _stalls_in(records: dict[str, list[dict]], t0: float,
               duration_s: float) -> tuple[float | None, list[tuple[float, float]], dict[int, int]]:
    """The median step, the stalls ``(start, seconds beyond the median step)`` and each step's quorum size, from
    the first commit of each step in the window (:func:`stall_figures`)."""
    first: dict[int, float] = {}
    quorum: dict[int, int] = {}
    for rs in records.values():
        for r in rs:
            if r.get("committed") and t0 <= r["t"] <= t0 + duration_s:
                first[r["step"]] = min(first.get(r["step"], r["t"]), r["t"])
                quorum[r["step"]] = max(quorum.get(r["step"], 0), r.get("quorum", 0))
    times = sorted(first.values())
    gaps = [(a, b - a) for a, b in zip(times, times[1:])]
    if not gaps:
        return None, [], quorum
    step = median(g for _, g in gaps)
    return step, [(a, g - step) for a, g in gaps if g > max(0.5, 5 * step)], quorum


def stalls_by_fault(records: dict[str, list[dict]], faults: Sequence[dict], t0: float,
                    duration_s: float) -> dict[str, dict[str, Any]]:
    """Per kind of fault (``faults`` as the injector logged them: ``t``, ``kind``, ``done``): how many were
    injected, the stall each cost (the stalls that begin after it, from half a second before it, and before
    the next fault) as ``median_s``/``max_s``, and their ``total_s``. A fault whose replica was not up (a
    restart still under way) is not injected and not counted."""
    _, found, _ = _stalls_in(records, t0, duration_s)
    done = sorted((f for f in faults if f.get("done", f.get("killed"))), key=lambda f: f["t"])
    per_kind: dict[str, list[float]] = {}
    for i, fault in enumerate(done):
        until = done[i + 1]["t"] - 0.5 if i + 1 < len(done) else float("inf")
        cost = sum(length for start, length in found if fault["t"] - 0.5 <= start < until)
        per_kind.setdefault(fault.get("kind", "kill"), []).append(cost)
    return {kind: {"faults": len(costs), "median_s": round(median(costs), 2), "max_s": round(max(costs), 2),
                   "total_s": round(sum(costs), 2)} for kind, costs in sorted(per_kind.items())}


def absence_bound(faults: Sequence[dict], to_commit_of: dict[tuple[str, float], float], t0: float, duration_s: float,
                  replicas: int = REPLICAS) -> float | None:
    """The sample efficiency a run would have had if no survivor ever stalled and a faulted replica trained
    again the moment its fault was over: ``1 - absent / (replicas x D)``, where a stop or a partition keeps its
    replica absent from the fault to its end (``ended``), a kill from the kill to its replacement's first commit
    (``to_commit_of``, by the kill's ``(host, t)``; to the window's end if none was measured), each clipped to the
    window. The faults' own cost (a kill's, given how soon its replacement committed); the sample efficiency's
    shortfall below it is what the stalls and the rejoins cost. None when a stop or a partition has no ``ended``
    (a run recorded before it was kept)."""
    end = t0 + duration_s
    absent = 0.0
    for fault in faults:
        if not fault.get("done", fault.get("killed")) or fault["t"] > end:
            continue
        if fault.get("kind", "kill") == "kill":
            back = fault["t"] + to_commit_of.get((fault["host"], fault["t"]), end - fault["t"])
        elif "ended" in fault:
            back = fault["ended"]
        else:
            return None
        absent += max(0.0, min(back, end) - max(fault["t"], t0))
    return round(1 - absent / (replicas * duration_s), 4)


def _serving_from(start: dict) -> float:
    """When a process began to stand for its replica: its start, or a warm standby's activation."""
    return start.get("activated") or start["started"]


def _restart_of(kill: dict, records: dict[str, list[dict]], starts: dict[str, list[dict]]) -> dict | None:
    """What the killed replica's next process did: its start event and its first committed step."""
    name = kill["host"]
    later = [s for s in starts.get(name, []) if s["pid"] != kill["pid"] and _serving_from(s) >= kill["t"] - 1.0]
    if not later:
        return None
    start = min(later, key=_serving_from)
    first = next((r for r in sorted(records.get(name, []), key=lambda r: r["t"])
                  if r["pid"] == start["pid"] and r.get("committed", True)), None)
    return {"start": start, "first": first}


def analyse_run(records: dict[str, list[dict]], starts: dict[str, list[dict]], kills: Sequence[dict], t0: float,
                duration_s: float, rate: float, mode: str = "ft", replicas: int = REPLICAS) -> dict[str, Any]:
    """The figures of one run (module doc): ``records``/``starts`` by host name, ``kills`` as the killer
    logged them (``t``, ``host``, ``pid``, ``killed``), the window ``[t0, t0 + duration_s]``, the fault-free
    committed-step ``rate`` of the same mode."""
    faults = kills
    kills = [k for k in faults if k.get("kind", "kill") == "kill"]
    curve = ft_progress(records) if mode == "ft" else failfast_progress(records, kills)
    end = t0 + duration_s
    committed = value_at(curve, end) - value_at(curve, t0)
    expected = rate * duration_s
    result: dict[str, Any] = {
        "committed_steps": committed, "fault_free_steps": round(expected, 1),
        "efficiency": round(committed / expected, 4) if expected > 0 else None,
        "kills": sum(1 for k in kills if k.get("killed")),
        "kills_missed": sum(1 for k in kills if not k.get("killed")),
    }
    if len(faults) > len(kills):  # other kinds than kills: how many of each were injected, how many skipped
        kinds = sorted({f["kind"] for f in faults})
        result["faults"] = {kind: sum(1 for f in faults if f["kind"] == kind and f.get("done")) for kind in kinds}
        result["faults_missed"] = sum(1 for f in faults if not f.get("done"))
    if mode == "ft":
        quorum_of: dict[int, int] = {}
        for rs in records.values():
            for r in rs:
                if r.get("committed") and t0 < r["t"] <= end:
                    quorum_of[r["step"]] = max(quorum_of.get(r["step"], 0), r.get("quorum", 0))
        result["sample_efficiency"] = round(sum(quorum_of.values()) / (replicas * expected), 4) if expected > 0 else None
        result["discarded_steps"] = sum(1 for rs in records.values() for r in rs
                                        if not r.get("committed") and t0 < r["t"] <= end)
        result.update(stall_figures(records, t0, duration_s))
        result["stalls_by_fault"] = stalls_by_fault(records, faults, t0, duration_s)
    to_commit, from_start, heal_bytes, parts = [], [], [], []
    to_commit_of: dict[tuple[str, float], float] = {}  # a kill's (host, t): seconds to its replacement's first commit
    for kill in kills:
        if not kill.get("killed"):
            continue
        restart = _restart_of(kill, records, starts)
        if restart is None or restart["first"] is None:
            continue
        start, first = restart["start"], restart["first"]
        if mode == "ft" and first["t"] > end + 60:
            continue
        to_commit.append(first["t"] - kill["t"])
        to_commit_of[(kill["host"], kill["t"])] = first["t"] - kill["t"]
        from_start.append(first["t"] - _serving_from(start))
        if start.get("activated"):  # a warm standby: built before the kill; the launcher's part is its activation
            parts.append({"launcher": start["activated"] - kill["t"], "imports": 0.0, "process_group": 0.0,
                          "wrap": 0.0, "join": first["t"] - start["activated"]})
        else:
            parts.append({"launcher": start["started"] - kill["t"], "imports": start["imported"] - start["started"],
                          "process_group": start["initialized"] - start["imported"],
                          "wrap": start["wrapped"] - start["initialized"], "join": first["t"] - start["wrapped"]})
        if first.get("healed"):
            heal_bytes.append(first.get("healed_bytes", 0) / first["healed"])
    if mode == "ft" and "faults" in result:
        bound = absence_bound(faults, to_commit_of, t0, duration_s, replicas)
        if bound is not None:
            result["absence_bound"] = bound
    result["restarts_measured"] = len(to_commit)
    if to_commit:
        result["kill_to_first_commit_s"] = {"median": round(median(to_commit), 2), "max": round(max(to_commit), 2)}
        result["start_to_first_commit_s"] = {"median": round(median(from_start), 2), "max": round(max(from_start), 2)}
        result["restart_breakdown_median_s"] = {k: round(median(p[k] for p in parts), 2) for k in parts[0]}
    if heal_bytes:
        result["bytes_per_heal"] = int(median(heal_bytes))
    result["curve"] = thin_curve([(round(t - t0, 3), v - value_at(curve, t0)) for t, v in curve if t0 - 1 <= t <= end + 1])
    result["kill_times"] = [round(k["t"] - t0, 3) for k in kills if k.get("killed")]
    if "faults" in result:
        result["fault_times"] = [[round(f["t"] - t0, 3), f["kind"]] for f in faults if f.get("done")]
    return result


def _fmt_s(pair: dict | None) -> str:
    return f"{pair['median']:.1f} / {pair['max']:.1f}" if pair else "—"


def _stalls(run: dict) -> str:
    return f"{run['stalls']}, {run['stall_s']:.1f} ({run['max_stall_s']:.1f})" if "stalls" in run else "—"


def _by_fault(run: dict) -> str:
    by = run.get("stalls_by_fault")
    if not by:
        return "—"
    return "; ".join(f"{k} {v['faults']} {v['median_s']:.1f} / {v['max_s']:.1f}" for k, v in by.items())


def _pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "—"


def _cell_order(key: str) -> tuple[int, str, float]:
    """Cells in the order of ALGORITHMS, then the longest interval first."""
    algorithm, interval = key.split("@")
    order = list(ALGORITHMS).index(algorithm) if algorithm in ALGORITHMS else len(ALGORITHMS)
    return order, algorithm, -float(interval.rstrip("s"))


def markdown_table(results: dict[str, Any]) -> str:
    """The table of ``results`` (``cells`` keyed ``<algorithm>@<interval>s``)."""
    lines = ["| algorithm | fault every | efficiency (steps) | by samples | bound by samples (the faults' own absence) | "
             "kill → first commit, median / max (s) | "
             "stalls: count, total (max) s | load-free estimate | "
             "process start → first commit, median / max (s) | where the restart goes (median s: launcher, imports, "
             "process group, wrap, join) | bytes per heal | kills | stall per fault: kind n median / max s | "
             "baseline efficiency (fail-fast + checkpoints) | baseline kill → first step, median / max (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key in sorted(results.get("cells", {}), key=_cell_order):
        cell = results["cells"][key]
        algorithm, interval = key.split("@")
        ft, base = cell.get("ft", {}), cell.get("baseline")
        parts = ft.get("restart_breakdown_median_s")
        breakdown = ", ".join(f"{v:.1f}" for v in parts.values()) if parts else "—"
        heal = f"{ft['bytes_per_heal'] / 1e6:.1f} MB" if ft.get("bytes_per_heal") else "—"
        lines.append(
            f"| {algorithm} | {interval} | {_pct(ft.get('efficiency'))} | {_pct(ft.get('sample_efficiency'))} | "
            f"{_pct(ft.get('absence_bound'))} | {_fmt_s(ft.get('kill_to_first_commit_s'))} | {_stalls(ft)} | {_pct(ft.get('load_free_efficiency'))} | "
            f"{_fmt_s(ft.get('start_to_first_commit_s'))} | {breakdown} | "
            f"{heal} | {ft.get('kills', 0)} | {_by_fault(ft)} | "
            f"{_pct(base.get('efficiency')) if base else 'not run'} | "
            f"{_fmt_s(base.get('kill_to_first_commit_s')) if base else '—'} |")
    return "\n".join(lines) + "\n"


def write_report(results: dict[str, Any], out_dir: Path) -> list[str]:
    """Write ``fault_tolerance.json``, ``.md`` and (with matplotlib) ``.png`` under ``out_dir``; return notes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = []
    (out_dir / "fault_tolerance.json").write_text(json.dumps(results, indent=1) + "\n")
    setup = results.get("setup", {})
    md = [f"# Fault tolerance under faults ({results.get('date', '')})", "",
          f"{setup.get('description', '')}", "", markdown_table(results)]
    rates = results.get("fault_free", {})
    if rates:
        md += ["Fault-free committed steps per second (the run right before each cell's; load average after it; "
               "stalls without a fault, where counted): "
               + ", ".join(f"{k}: {v['rate']:.2f} ({v.get('load_after', '?').split()[0]}"
                           + (f"; {v['stalls']} stalls" if v.get("stalls") is not None else "") + ")"
                           for k, v in sorted(rates.items())), ""]
    if results.get("load"):
        md += ["Load average (1, 5, 15 min) after each run: " + "; ".join(results["load"]), ""]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        notes.append("matplotlib is not installed: results/fault_tolerance.png was not drawn")
    else:
        cells = sorted(results.get("cells", {}), key=_cell_order)
        if cells:
            cols = 2
            rows = (len(cells) + cols - 1) // cols
            fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.2 * rows), squeeze=False)
            for ax, key in zip(axes.flat, cells):
                cell = results["cells"][key]
                algorithm = key.split("@")[0]
                for label, run, style in (("fault-tolerant", cell.get("ft"), "-"),
                                          ("fail-fast + checkpoints", cell.get("baseline"), "--")):
                    if run and run.get("curve"):
                        ts, vs = zip(*run["curve"])
                        ax.step(ts, vs, style, where="post", label=label)
                duration = setup.get("duration_s", 300)
                for run, color in ((cell.get("ft"), "C0"), (cell.get("baseline"), "C1")):
                    if run and run.get("fault_free_rate"):
                        ax.plot([0, duration], [0, run["fault_free_rate"] * duration], ":", color=color,
                                label="fault-free rate" + ("" if run is cell.get("ft") else " (fail-fast)"))
                ft_run = cell.get("ft") or {}
                colors = {"kill": "red", "stop": "purple", "partition": "orange"}
                for t, kind in ft_run.get("fault_times") or [(t, "kill") for t in ft_run.get("kill_times", [])]:
                    ax.axvline(t, color=colors.get(kind, "red"), alpha=0.3, linewidth=0.8)
                ax.set_title(f"{algorithm}, a {'fault' if ft_run.get('fault_times') else 'kill'} every "
                             f"{key.split('@')[1]}")
                ax.set_xlabel("seconds")
                ax.set_ylabel("committed steps")
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize=7)
            for ax in list(axes.flat)[len(cells):]:
                ax.axis("off")
            fig.tight_layout()
            fig.savefig(out_dir / "fault_tolerance.png", dpi=90)
            plt.close(fig)
    md += [f"Note: {n}" for n in notes]
    (out_dir / "fault_tolerance.md").write_text("\n".join(md) + "\n")
    return notes


# --- running it -----------------------------------------------------------------------------------------
def _host_command(index: int, command: list[str]) -> list[str]:
    """``command`` on emulated host ``index`` (1-based), in a UTS namespace of its own whose host name is
    the host's address: torchft advertises ``socket.gethostname()`` to the other replicas (its manager, its
    checkpoint server), which must reach this host, not the shared machine's name."""
    address = f"10.77.0.{index}"
    return ["ip", "netns", "exec", f"bgh{index}", "unshare", "--uts", "sh", "-c",
            f'hostname {address} && exec "$@"', "sh", *command]


def _env(index: int, mode: str) -> dict[str, str]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT),
           "BAGUA_BENCH_HOST": f"h{index}", "BAGUA_FT_REPLICA_ID_PREFIX": f"h{index}_", "RUST_LOG": "warn",
           "BAGUA_COMM_TIMEOUT_S": "30"}
    if mode == "failfast":
        # A store of each rendezvous round's own (rank 0's worker hosts it on a new port): with torchrun's
        # shared agent store the workers of every round meet in one store under /bagua/attempt_<restart
        # count>, and that count is each agent's own: the node whose worker was killed counts a restart,
        # the others (restarted because a node is waiting) do not, so the attempts never meet.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _link(host: str, state: str) -> None:
    """Host ``h<i>``'s link (its veth on the bridge) ``up`` or ``down``."""
    subprocess.run(["ip", "link", "set", f"{NETNS_PREFIX}v{host[1:]}", state], check=True)


def inject_faults(schedule: Sequence[tuple[float, int, str]], t0: float, names: Sequence[str], work: Path,
                  args: argparse.Namespace) -> list[dict]:
    """Inject ``schedule`` (:func:`fault_schedule`) from ``t0``; a stop or a partition ends ``--stop-seconds`` or
    ``--partition-seconds`` after it begins (every one has ended when this returns). A fault on a replica that is
    not up (its restart still under way) is skipped. Returns what was done: ``t``, ``host``, ``pid``, ``kind``,
    ``done`` (and ``killed``, for a kill; ``ended``, for a stop or a partition: when it was undone)."""
    faults: list[dict] = []
    ends: list[tuple[float, str, str, int, int]] = []  # (when, kind, host, pid, fault) of the stops and partitions in course

    def end_due(until: float) -> None:
        while ends and ends[0][0] <= until:
            when, kind, host, pid, index = ends.pop(0)
            while time.time() < when:
                time.sleep(0.02)
            if kind == "stop":
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            else:
                _link(host, "up")
            faults[index]["ended"] = time.time()
            print(f"  {time.time() - t0:6.1f} s: {kind} of {host} ended", flush=True)

    try:
        for offset, victim, kind in schedule:
            end_due(t0 + offset)
            while time.time() < t0 + offset:
                time.sleep(0.02)
            host = names[victim]
            pid = int((work / f"{host}.pid").read_text())
            busy = any(h == host for _, _, h, _ in ends)
            done = (_alive(pid) or kind == "partition") and not busy
            if done and kind == "kill":
                os.kill(pid, signal.SIGKILL)
            elif done and kind == "stop":
                os.kill(pid, signal.SIGSTOP)
                ends.append((time.time() + args.stop_seconds, kind, host, pid, len(faults)))
            elif done:
                _link(host, "down")
                ends.append((time.time() + args.partition_seconds, kind, host, pid, len(faults)))
            ends.sort()
            faults.append({"t": time.time(), "host": host, "pid": pid, "kind": kind, "done": done,
                           "killed": done and kind == "kill"})
            print(f"  {time.time() - t0:6.1f} s: {kind} {host} pid {pid}" + ("" if done else " (not up: still "
                  "restarting, or a fault in course; skipped)"), flush=True)
    finally:
        end_due(float("inf"))
    return faults


def run_once(args: argparse.Namespace, algorithm: str, mode: str, interval_s: float, duration_s: float,
             work: Path) -> dict[str, Any]:
    """One run on the hosts already up: start the job, wait for its first 3-replica step, kill on schedule
    for ``duration_s`` seconds, stop it; return the raw records and the kills."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    spec = json.dumps(ALGORITHMS[algorithm])
    worker = [str(REPO_ROOT / "benchmarks" / "fault_tolerance_worker.py"), "--mode", mode, "--out", str(work),
              "--algorithm", spec, "--model", args.model, "--batch-size", str(args.batch_size),
              "--checkpoint-every", str(args.checkpoint_every)]
    procs: list[subprocess.Popen] = []
    logs = []
    lighthouse = None
    try:
        if mode == "ft":
            binary = shutil.which("torchft_lighthouse")
            if binary is None:
                raise SystemExit("torchft_lighthouse not found: install the fault-tolerant extra (pip install -e '.[ft]')")
            out = open(work / "lighthouse.out", "w")
            logs.append(out)
            lighthouse = subprocess.Popen(
                ["ip", "netns", "exec", f"{NETNS_PREFIX}h{LIGHTHOUSE_HOST}", binary, "--min_replicas", "1",
                 "--bind", f"[::]:{LIGHTHOUSE_PORT}",
                 "--join_timeout_ms", str(args.join_timeout_ms), "--heartbeat_timeout_ms",
                 str(args.heartbeat_timeout_ms)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        for index in range(1, REPLICAS + 1):
            if mode == "ft":
                launcher = ["--fault-tolerant", "--lighthouse", f"http://10.77.0.{LIGHTHOUSE_HOST}:{LIGHTHOUSE_PORT}",
                            "--ft-timeout", str(args.ft_timeout), "--standby", str(args.standby)]
            else:
                launcher = ["--nnodes", str(REPLICAS), "--nproc_per_node", "1", "--rdzv-backend", "c10d",
                            "--rdzv-endpoint", f"10.77.0.1:{RDZV_PORT}", "--rdzv-id", f"bench{os.getpid()}"]
            command = [sys.executable, "-m", "bagua_cli", "run", *launcher, "--max-restarts",
                       str(args.max_restarts), "--monitor-interval", str(args.monitor_interval), *worker]
            out = open(work / f"h{index}.out", "w")
            logs.append(out)
            procs.append(subprocess.Popen(_host_command(index, command), env=_env(index, mode), cwd=REPO_ROOT, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        names = [f"h{i}" for i in range(1, REPLICAS + 1)]
        deadline = time.time() + args.start_timeout
        t0 = None
        while t0 is None:
            if time.time() > deadline or any(p.poll() is not None for p in procs):
                tails = "\n".join(f"--- h{i + 1} ---\n{(work / f'h{i + 1}.out').read_text()[-2000:]}"
                                  for i in range(REPLICAS))
                raise RuntimeError(f"{algorithm} ({mode}): no step of all {REPLICAS} replicas within "
                                   f"{args.start_timeout} s or a launcher exited:\n{tails}")
            time.sleep(0.2)
            records = {n: read_records(work / f"{n}.jsonl")[0] for n in names}
            t0 = window_start(records) if mode == "ft" else \
                min((r["t"] for rs in records.values() for r in rs), default=None)
        faults = inject_faults(fault_schedule(interval_s, duration_s, args.fault_kinds, seed=args.seed), t0, names,
                               work, args)
        while time.time() < t0 + duration_s + args.tail:
            time.sleep(0.2)
        (work / "stop").write_text("stop")
        for proc in procs:
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
    finally:
        (work / "stop").write_text("stop")
        for proc in procs + ([lighthouse] if lighthouse else []):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=30)
        for log in logs:
            log.close()
    records, starts = {}, {}
    for name in names:
        records[name], starts[name] = read_records(work / f"{name}.jsonl")
    return {"records": records, "starts": starts, "kills": faults, "t0": t0}


def _load_results(path: Path) -> dict[str, Any]:
    if path.exists():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            pass
    return {"cells": {}, "fault_free": {}}


def _load() -> str:
    return Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else "?"


def reanalyse(out_dir: Path, work: Path) -> int:
    """Recompute :func:`stall_figures` of every fault-tolerant cell of ``out_dir``'s results from the
    workers' logs kept in ``work`` (``<algorithm>_ft_<interval>/``), and write the report again."""
    results = _load_results(out_dir / "fault_tolerance.json")
    duration = results.get("setup", {}).get("duration_s", 300)
    for key, cell in results.get("cells", {}).items():
        algorithm, interval = key.split("@")
        run = work / f"{algorithm}_ft_{interval.rstrip('s')}"
        if "ft" not in cell or not run.exists():
            continue
        records = {n: read_records(run / f"{n}.jsonl")[0] for n in (f"h{i}" for i in range(1, REPLICAS + 1))}
        t0 = window_start(records)
        if t0 is not None:
            cell["ft"].update(stall_figures(records, t0, duration))
    for cell in results.get("cells", {}).values():
        for run in cell.values():
            if run.get("curve"):
                run["curve"] = thin_curve([tuple(point) for point in run["curve"]])
    for note in write_report(results, out_dir):
        print(note, flush=True)
    return 0


def _fault_words(args: argparse.Namespace) -> str:
    words = {"kill": "SIGKILL of its training process, restarted by its launcher",
             "stop": f"SIGSTOP for {args.stop_seconds:g} s",
             "partition": f"its link down for {args.partition_seconds:g} s"}
    return ", ".join(words[k] for k in args.fault_kinds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"of {', '.join(ALGORITHMS)}")
    parser.add_argument("--intervals", default="60,15", help="seconds between kills, comma-separated")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of training under kills (D)")
    parser.add_argument("--fault-free-duration", type=float, default=90.0,
                        help="seconds of the fault-free run that gives the steady committed-step rate")
    parser.add_argument("--baseline", default="gradient_allreduce",
                        help="algorithms to run fail-fast with checkpoints too (comma-separated, or none)")
    parser.add_argument("--modes", default="ft,failfast",
                        help="ft (fault-tolerant), failfast (the baseline, for the --baseline algorithms)")
    parser.add_argument("--rate", default="1gbit", help="the emulated link")
    parser.add_argument("--model", default="mlp2m")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint-every", type=int, default=50, help="fail-fast baseline: steps between checkpoints")
    parser.add_argument("--seed", type=int, default=None,
                        help="pick the victim and the fault's kind at random (default: round-robin, kinds in turn)")
    parser.add_argument("--faults", default="kill",
                        help=f"the kinds of fault, comma-separated, of {', '.join(FAULT_KINDS)} (module doc)")
    parser.add_argument("--stop-seconds", type=float, default=3.0, help="how long a stopped replica stays stopped")
    parser.add_argument("--partition-seconds", type=float, default=3.0,
                        help="how long a partitioned host stays cut off")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=500,
                        help="the lighthouse's: a replica silent this long is dropped (bagua run --fault-tolerant's "
                             "default and torchft's are 5000; 500 on this benchmark's quiet hosts)")
    parser.add_argument("--join-timeout-ms", type=int, default=1000,
                        help="the lighthouse's wait for stragglers (bagua run --fault-tolerant's default, 1000)")
    parser.add_argument("--ft-timeout", type=float, default=10.0, help="BAGUA_FT_TIMEOUT_S of the replicas")
    parser.add_argument("--max-restarts", type=int, default=1000)
    parser.add_argument("--standby", type=int, default=0,
                        help="warm standbys per host (bagua run --fault-tolerant --standby): a killed replica is "
                             "replaced by one, built and wrapped already")
    parser.add_argument("--monitor-interval", type=float, default=0.1, help="torchrun's, seconds")
    parser.add_argument("--start-timeout", type=float, default=240.0)
    parser.add_argument("--tail", type=float, default=1.0, help="seconds run past the window before stopping")
    parser.add_argument("--work", default="/tmp/bagua_ft_bench", help="the runs' logs")
    parser.add_argument("--out", default=str(REPO_ROOT / "results"))
    parser.add_argument("--reanalyse", action="store_true",
                        help="no runs: recompute the stall figures of the cells in --out from the logs in --work")
    args = parser.parse_args(argv)
    if args.reanalyse:
        return reanalyse(Path(args.out), Path(args.work))
    algorithms = [a for a in args.algorithms.split(",") if a]
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        parser.error(f"--algorithms: unknown {unknown}; known: {', '.join(ALGORITHMS)}")
    args.fault_kinds = [k for k in args.faults.split(",") if k]
    try:
        fault_schedule(1, 2, args.fault_kinds)
    except ValueError as exc:
        parser.error(f"--faults: {exc}")
    intervals = [float(v) for v in args.intervals.split(",") if v]
    baseline = [] if args.baseline in ("", "none") else args.baseline.split(",")
    out_dir = Path(args.out)
    results = _load_results(out_dir / "fault_tolerance.json")
    results.setdefault("cells", {})
    results.setdefault("fault_free", {})
    results.setdefault("load", [])

    work = Path(args.work)
    print(f"load before: {_load()}", flush=True)
    with netns_link(LIGHTHOUSE_HOST, args.rate, "0ms") as hosts:
        results["setup"] = {
            "description": (f"{REPLICAS} replicas of one rank on emulated hosts ({hosts.link}), {args.model} "
                            f"(batch {args.batch_size} per replica, subnormals flushed to zero), a fault every K s "
                            f"on a replica ({_fault_words(args)}; "
                            f"{'round-robin' if args.seed is None else f'random, seed {args.seed}'}) for "
                            f"{args.duration:g} s; lighthouse on a host of its own (heartbeat "
                            f"timeout {args.heartbeat_timeout_ms} ms, join timeout {args.join_timeout_ms} ms); "
                            f"fault-free rate from a {args.fault_free_duration:g} s run; baseline fail-fast with a "
                            f"checkpoint every {args.checkpoint_every} steps; "
                            f"{f'{args.standby} warm standby per host; ' if args.standby else ''}torchrun monitor interval "
                            f"{args.monitor_interval:g} s; {platform.node()} ({os.cpu_count()} cores, shared)"),
            "duration_s": args.duration, "heartbeat_timeout_ms": args.heartbeat_timeout_ms,
            "join_timeout_ms": args.join_timeout_ms, "model": args.model, "link": hosts.link,
            "faults": args.fault_kinds, "standby": args.standby}
        results["date"] = time.strftime("%Y-%m-%d %H:%M")
        for algorithm in algorithms:
            modes = [m for m in ("ft", "failfast") if m in args.modes.split(",")
                     and (m == "ft" or algorithm in baseline)]
            for mode in modes:
                label = f"{algorithm}/{mode}"
                for interval in intervals:
                    # the fault-free run right before the run it is the denominator of: the machine is
                    # shared, and its load changes the step time more than anything measured here
                    key = f"{algorithm}@{interval:g}s"
                    print(f"{label}: fault-free {args.fault_free_duration:g} s (load {_load()})", flush=True)
                    raw = run_once(args, algorithm, mode, 0, args.fault_free_duration,
                                   work / f"{algorithm}_{mode}_free")
                    curve = ft_progress(raw["records"]) if mode == "ft" else failfast_progress(raw["records"], [])
                    rate = fault_free_rate(curve, raw["t0"], args.fault_free_duration)
                    results["fault_free"][f"{label}@{interval:g}s"] = {
                        "rate": round(rate, 4), "seconds": args.fault_free_duration, "load_after": _load(),
                        # a stall with no fault: a live replica left out (a heartbeat late past its timeout)
                        "stalls": stall_figures(raw["records"], raw["t0"], args.fault_free_duration).get("stalls")}
                    print(f"  {rate:.2f} committed steps/s", flush=True)
                    print(f"{label}: a fault ({args.faults}) every {interval:g} s for {args.duration:g} s (load {_load()})",
                          flush=True)
                    raw = run_once(args, algorithm, mode, interval, args.duration, work / f"{algorithm}_{mode}_{interval:g}")
                    cell = analyse_run(raw["records"], raw["starts"], raw["kills"], raw["t0"], args.duration, rate, mode)
                    cell["fault_free_rate"] = round(rate, 4)
                    cell["load_after"] = _load()
                    results["cells"].setdefault(key, {})["ft" if mode == "ft" else "baseline"] = cell
                    summary = {k: v for k, v in cell.items() if k not in ("curve", "kill_times")}
                    print(f"  {json.dumps(summary)}", flush=True)
                    results["load"].append(f"{time.strftime('%H:%M')} after {label}@{interval:g}s: {_load()}")
                    for note in write_report(results, out_dir):
                        print(note, flush=True)
    print(f"load after: {_load()}", flush=True)
    for note in write_report(results, out_dir):
        print(note, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
