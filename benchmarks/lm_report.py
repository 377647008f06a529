"""Writing the LM benchmark's results: ``results/<name>.md`` (tables), ``.json`` (every run's curve and the
summary) and ``.png`` (validation loss against time); the figures come from :mod:`benchmarks.lm_summary`.

One table per network (and host count when sharded): per method the median over the seeds and, with several
seeds, the spread (min-max) of the seconds to the target; the zero-communication limit as a row of its own,
and each method's share of it, marked where a method beats it. With ``--slow-host`` one table per network
sets each method's run with the slow host beside its equal-speed run.

    python -m benchmarks.lm_report results/lm.json [--target 2.5]     # rewrite lm.md and lm.png

Example::

    >>> write_lm(rows, target=2.0, results=Path("results"))
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from benchmarks.lm_summary import crossing, group_key, host_throughputs, loss_at, summarize
from benchmarks.report import have_matplotlib

__all__ = ["crossing", "loss_at", "summarize", "lm_markdown", "write_lm"]

BEATS = "beats it"


def _fmt(value: float | None, pattern: str, missing: str = "not reached") -> str:
    return missing if value is None else pattern.format(value)


def _seconds(r: dict) -> str:
    """The median seconds to the target, with the spread over the seeds where there are several."""
    spread = r.get("seconds_range")
    if r["seconds_to_target"] is None:
        if spread and spread[0] is not None:
            return f"not reached ({r['reached']} of {len(r['seeds'])} seeds did, from {spread[0]:.0f})"
        return "not reached"
    if not spread:
        return f"{r['seconds_to_target']:.0f}"
    return f"{r['seconds_to_target']:.0f} ({spread[0]:.0f}-{_fmt(spread[1], '{:.0f}')})"


def _share(r: dict) -> str:
    share = r.get("of_limit")
    return "-" if share is None else f"{share:.2f}" + (f" ({BEATS})" if share >= 1.005 else "")


def _loss(r: dict) -> str:
    spread = r.get("loss_range")
    return f"{r['loss_at_budget']:.3f}" + (f" ({spread[0]:.3f}-{spread[1]:.3f})" if spread else "")


def _speedup(r: dict) -> str:
    if r["speedup_vs_ddp"] is None:
        return "-"
    text = f"{r['speedup_bound']}{r['speedup_vs_ddp']:.2f}x"
    if r.get("speedup_vs_ddp_estimated") is not None:
        text += f" (est. {r['speedup_vs_ddp_estimated']:.1f}x)"
    return text


def _limit_line(group: Sequence[dict], baseline: str) -> str:
    first = next((r for r in group if "curve" in r), None)
    if all(r["method"] == baseline for r in group):
        return f"{baseline} alone on this network: its samples to the target serve the limits of the other tables."
    if first is None or first.get("limit_s") is None:
        return (f"Zero-communication limit: not measured here (needs {baseline}'s samples to the target on some "
                "network of the run, and `alone` under these conditions).")
    alone = next(r for r in group if r["method"] == "alone")
    return (f"Zero-communication limit: {baseline}'s {first['baseline_samples']:.0f} samples to the target over the "
            f"hosts' {alone['hosts_samples_per_s']:.1f} samples/s training alone = {first['limit_s']:.0f} s; a share above "
            "1 beats it (fewer samples to the target than synchronous training).")


def _table(group: Sequence[dict], target: float, baseline: str, sharded: bool) -> list[str]:
    held = ["MB held/rank (x replicated)"] if sharded else []
    link = "MB/step on a host's link" if sharded else "MB sent/step/rank"
    lines = ["| " + " | ".join(["method", *held, "s/step", "s/step waited on rounds", link,
                                 f"seconds to loss {target}", f"sooner than {baseline}",
                                 f"samples to target vs {baseline}", "share of the zero-communication limit",
                                 "loss at budget"]) + " |",
             "| --- |" + " ---: |" * (len(held) + 8)]
    first = next((r for r in group if "curve" in r), None)
    if first is not None and first.get("limit_s") is not None:
        lines.append("| zero-communication limit |" + " |" * len(held) + f" | | 0 | {first['limit_s']:.0f} | | 1.00x | "
                     "1.00 | |")
    for r in group:
        if "curve" not in r:
            lines.append(f"| {r['method']} | failed: {r.get('error', '?')[:80]} |" + " |" * (len(held) + 7))
            continue
        cells = [r["method"]]
        if sharded:
            cells.append(f"{r['held_bytes_per_rank'] / 1e6:.1f} "
                         f"({r['held_bytes_per_rank'] / r['replicated_bytes_per_rank']:.2f})")
        cells += [f"{1 / max(r['steps_per_s'], 1e-9):.2f}", _fmt(r.get("exposed_s_per_step"), "{:.3f}", "-"),
                  f"{r['mb_per_step']:.2f}", _seconds(r), _speedup(r),
                  _fmt(r["samples_vs_ddp"], "{:.2f}x", "-"), _share(r), _loss(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _budgets(first: dict, group: Sequence[dict]) -> str:
    budgets = sorted({r["budget_s"] for r in group if "curve" in r} | {first["budget_s"]})
    return " or ".join(f"{b:.0f}" for b in budgets)


def _title(first: dict | None, network: str, group: Sequence[dict] = ()) -> str:
    """``group``: the rows of the table (their budgets, where they differ: runs of several invocations merged)."""
    if first is None:
        return f"### {network}: not run"
    hosts = (f"{first['hosts']} hosts x {first['ranks_per_host']} ranks (FSDP2 inside a host)" if first.get("sharded")
             else f"{first['world_size']} hosts")
    title = (f"### {network}: {first['model']} ({first['params'] / 1e6:.1f}M parameters), batch {first['batch_size']} x "
             f"{first['seq_len']} bytes per rank, {hosts}, {_budgets(first, group)} s of training per method")
    if len(first.get("seeds", [0])) > 1:
        title += f", seeds {', '.join(str(s) for s in first['seeds'])} (median, min-max)"
    return title + (f"; link: {first['link']}" if first.get("link") else "")


def _emulated(group: Sequence[dict], slow: tuple) -> str:
    """How slow the slow host was, measured: its samples/s training alone over the others'."""
    alone = next((r for r in group if r["method"] == "alone" and "curve" in r), None)
    if alone is None:
        return "(`alone` not run: the slow host's speed not measured)"
    speeds = host_throughputs(alone)
    others = [s for h, s in enumerate(speeds) if h != slow[0]]
    return (f"Measured with `alone` (first seed): the slow host trained at {speeds[slow[0]] / (sum(others) / len(others)):.2f} "
            f"of the other hosts' samples/s (asked: {slow[1]:g}).")


def _evaluated(group: Sequence[dict]) -> list[str]:
    """Which rows were evaluated where (:mod:`benchmarks.lm_worker`): after merges (the global weights), at step
    counts or clock times (the average of the ranks' weights; alone: each host's own); a paragraph, or none for
    rows that do not say."""
    where: dict[str, list[str]] = {}
    for r in group:
        if "curve" in r and r.get("evaluated"):
            methods = where.setdefault(r["evaluated"], [])
            if r["method"] not in methods:
                methods.append(r["method"])
    if not where:
        return []
    return ["Evaluated " + "; ".join(f"{point}: {', '.join(methods)}" for point, methods in where.items()) + ".", ""]


def _side_by_side(equal: Sequence[dict], slow: Sequence[dict], target: float) -> list[str]:
    label = next(r["pace"].split(":")[0] for r in slow if r.get("pace"))
    lines = [f"| method | equal speeds: samples/s | seconds to loss {target} | share of the limit | {label}: samples/s | "
             f"seconds to loss {target} | share of the heterogeneous limit | time with the slow host / equal |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    limits = [next((r["limit_s"] for r in g if "curve" in r), None) for g in (equal, slow)]
    lines.append(f"| zero-communication limit | | {_fmt(limits[0], '{:.0f}', '-')} | 1.00 | | "
                 f"{_fmt(limits[1], '{:.0f}', '-')} | 1.00 | {_fmt(limits[1] / limits[0] if all(limits) else None, '{:.2f}', '-')} |")
    by_method = {r["method"]: r for r in equal}
    for r in slow:
        e = by_method.get(r["method"], {})
        if "curve" not in r or "curve" not in e:
            lines.append(f"| {r['method']} | failed: {(r.get('error') or e.get('error') or '?')[:80]} | | | | | | |")
            continue
        ratio = None if r["seconds_to_target"] is None or e["seconds_to_target"] is None else \
            r["seconds_to_target"] / e["seconds_to_target"]
        lines.append(f"| {r['method']} | {e['samples_per_s']:.1f} | {_seconds(e)} | {_share(e)} | {r['samples_per_s']:.1f} | "
                     f"{_seconds(r)} | {_share(r)} | {_fmt(ratio, '{:.2f}', '-')} |")
    return lines


def lm_markdown(rows: Sequence[dict], target: float, header: str = "", baseline: str = "ddp") -> str:
    """``rows``: :func:`summarize`'s."""
    lines = [header] if header else []
    conditions = list(dict.fromkeys(group_key(r) for r in rows))
    for network, slow in conditions:
        if slow is not None and slow[1] < 1:
            continue  # beside its equal-speed run
        group = [r for r in rows if group_key(r) == (network, slow)]
        first = next((r for r in group if "curve" in r), None)
        slowed = [c for c in conditions if c[0] == network and c[1] is not None and c[1][1] < 1]
        if slowed:
            for condition in slowed:
                other = [r for r in rows if group_key(r) == condition]
                pace = next((r["pace"] for r in other if r.get("pace")), "")
                lines += ["", _title(first, network, group + other), "", f"Slow host: {pace}. {_emulated(other, condition[1])}", "",
                          _limit_line(group, baseline) + " The heterogeneous limit: the same samples over the "
                          "hosts' summed throughput with the slow host. samples/s: the job's samples over the "
                          "slowest rank's training clock.", ""] + _evaluated(group + other) + \
                    _side_by_side(group, other, target)
            continue
        lines += ["", _title(first, network, group), "", _limit_line(group, baseline), ""] + _evaluated(group)
        lines += _table(group, target, baseline, bool(first and first.get("sharded")))
    return "\n".join(lines) + "\n"


def _plot(rows: Sequence[dict], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conditions = list(dict.fromkeys(group_key(r) for r in rows))
    fig, axes = plt.subplots(1, len(conditions), figsize=(6 * len(conditions), 4.5), squeeze=False)
    for ax, condition in zip(axes[0], conditions):
        for r in rows:
            if group_key(r) == condition and "curve" in r:
                ax.plot([p["seconds"] for p in r["curve"]], [p["loss"] for p in r["curve"]], label=r["method"],
                        linestyle="--" if r.get("ddp") else ":" if r.get("peer") else "-")
        ax.axhline(target, color="grey", linewidth=0.8)
        title = condition[0] + ("" if condition[1] is None or condition[1][1] == 1 else
                                f", host {condition[1][0]} at {condition[1][1]:g}")
        ax.set(title=title, xlabel="training seconds (first seed)", ylabel="validation loss (nats/byte)")
        ax.set_ylim(top=min(4.0, ax.get_ylim()[1]))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_lm(rows: Sequence[dict], target: float, results: Path, header: str = "", name: str = "lm",
             baseline: str = "ddp") -> list[Path]:
    """``results/<name>.md``, ``.json`` (the runs and their summary) and ``.png``; against ``baseline``."""
    results.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows, target, baseline)
    paths = [results / f"{name}.md", results / f"{name}.json"]
    paths[0].write_text(lm_markdown(summary, target, header, baseline))
    paths[1].write_text(json.dumps({"target_loss": target, "header": header, "baseline": baseline, "runs": list(rows),
                                    "summary": [{k: v for k, v in r.items() if k != "curve"} for r in summary]},
                                   indent=1))
    if have_matplotlib() and any("curve" in r for r in rows):
        _plot(summary, target, results / f"{name}.png")
        paths.append(results / f"{name}.png")
    return paths


def main(argv: list[str] | None = None) -> None:
    """Rewrite the tables and the plot from one or more ``.json`` results: the runs of several invocations (the
    same networks, more seeds for some methods) become one result set.

    Example::

        python -m benchmarks.lm_report /tmp/a/lm.json /tmp/b/lm.json --results results --name lm
    """
    parser = argparse.ArgumentParser(description="rewrite lm.md and lm.png from lm.json files (their runs merged)")
    parser.add_argument("json", nargs="+")
    parser.add_argument("--target", type=float, default=None, help="another target loss")
    parser.add_argument("--results", default=None, help="folder to write to (default: the first file's)")
    parser.add_argument("--name", default=None, help="file stem (default: the first file's)")
    args = parser.parse_args(argv)
    loaded = [json.loads(Path(path).read_text()) for path in args.json]
    first = loaded[0]
    target = first["target_loss"] if args.target is None else args.target
    runs = [run for data in loaded for run in (data["runs"] if "runs" in data else data["rows"])]  # "rows": pre-seeds
    header = " ".join(dict.fromkeys(data.get("header", "") for data in loaded))
    results = Path(args.results) if args.results else Path(args.json[0]).parent
    for path in write_lm(runs, target, results, header, args.name or Path(args.json[0]).stem,
                         first.get("baseline", "ddp")):
        print("wrote", path)

if __name__ == "__main__":
    main()
