"""Reading the LM benchmark's curves: time and samples to a target loss, loss at the budget; writing
``results/lm.md`` (tables), ``lm.json`` (every curve) and ``lm.png`` (validation loss against time).

Crossings are interpolated linearly between the two evaluations around the target. DDP computes the
same updates on every network (same weights, batches and arithmetic), so its samples to the target are
taken from whichever network it reached the target on, and every method's samples are relative to that.
Where DDP's budget ran out first, the speedup is a measured lower bound (``>``), and the table adds an
estimate: DDP's steps to the target (from another network) times its measured seconds per step here.

    python -m benchmarks.lm_report results/lm.json [--target 2.5]     # rewrite lm.md and lm.png

Example::

    >>> write_lm(rows, target=2.0, results=Path("results"))
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from benchmarks.report import have_matplotlib

__all__ = ["crossing", "loss_at", "summarize", "lm_markdown", "write_lm"]


def crossing(curve: Sequence[dict], target: float, key: str) -> float | None:
    """``key`` ("seconds" or "step") where the validation loss first reaches ``target``, or None."""
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


def summarize(rows: Sequence[dict], target: float, baseline: str = "ddp") -> list[dict]:
    """Per row: seconds and samples to the target, loss at the budget, steps/s, MB sent per step and rank;
    speedups against ``baseline`` (DDP; torch's HSDP for sharded runs) on the same network and samples
    relative to it (the keys say ``ddp``); a sharded run's rows also get the share of the zero-communication
    limit (``alone``: its seconds to the target over the method's)."""
    ddp_samples = [s for r in rows if r.get("method") == baseline and "curve" in r
                   for s in [crossing(r["curve"], target, "step")] if s is not None]
    ddp_steps = min(ddp_samples) if ddp_samples else None
    out = []
    for row in rows:
        if "curve" not in row:
            out.append(dict(row))
            continue
        curve, last = row["curve"], row["curve"][-1]
        steps_to = crossing(curve, target, "step")
        tx = row["tx_bytes"] / (row["world_size"] if row.get("iface") == "lo" else 1)
        out.append({**row, "seconds_to_target": crossing(curve, target, "seconds"), "steps_to_target": steps_to,
                    "samples_to_target": None if steps_to is None else steps_to * row["world_size"] * row["batch_size"],
                    "samples_vs_ddp": None if steps_to is None or not ddp_steps else steps_to / ddp_steps,
                    "loss_at_budget": loss_at(curve, row["budget_s"]), "steps_per_s": last["step"] / max(last["seconds"], 1e-9),
                    "mb_per_step": tx / max(row["steps"], 1) / 1e6})
    for network in dict.fromkeys(r["network"] for r in out):
        group = [r for r in out if r["network"] == network]
        ddp = next((r for r in group if r["method"] == baseline and "curve" in r), None)
        alone = next((r for r in group if r["method"] == "alone" and r.get("seconds_to_target") is not None), None)
        for r in group:
            r["of_zero_communication"] = None if alone is None or r.get("seconds_to_target") is None else \
                alone["seconds_to_target"] / max(r["seconds_to_target"], 1e-9)
            if ddp is None or r.get("seconds_to_target") is None:
                r["speedup_vs_ddp"], r["speedup_bound"] = None, ""
            elif ddp["seconds_to_target"] is not None:
                r["speedup_vs_ddp"], r["speedup_bound"] = ddp["seconds_to_target"] / max(r["seconds_to_target"], 1e-9), ""
            else:  # DDP did not get there within its budget: a lower bound, and an estimate
                r["speedup_vs_ddp"] = ddp["curve"][-1]["seconds"] / max(r["seconds_to_target"], 1e-9)
                r["speedup_bound"] = ">"
                if ddp_steps:
                    estimate = ddp_steps / ddp["steps_per_s"]
                    r["ddp_seconds_estimated"] = estimate
                    r["speedup_vs_ddp_estimated"] = estimate / max(r["seconds_to_target"], 1e-9)
    return out


def _fmt(value: float | None, pattern: str, missing: str = "not reached") -> str:
    return missing if value is None else pattern.format(value)


def _sharded_markdown(rows: Sequence[dict], target: float, baseline: str) -> list[str]:
    lines = [f"| method | MB held/rank (x replicated) | s/step | MB/step on a host's link | seconds to loss {target} | "
             f"sooner than {baseline} | share of the zero-communication limit | loss at budget |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if "curve" not in r:
            lines.append(f"| {r['method']} | failed: {r.get('error', '?')[:80]} | | | | | | |")
            continue
        held = f"{r['held_bytes_per_rank'] / 1e6:.1f} ({r['held_bytes_per_rank'] / r['replicated_bytes_per_rank']:.2f})"
        speedup = "-" if r["speedup_vs_ddp"] is None else f"{r['speedup_bound']}{r['speedup_vs_ddp']:.2f}x"
        lines.append(f"| {r['method']} | {held} | {1 / max(r['steps_per_s'], 1e-9):.2f} | {r['mb_per_step']:.2f} | "
                     f"{_fmt(r['seconds_to_target'], '{:.0f}')} | {speedup} | "
                     f"{_fmt(r['of_zero_communication'], '{:.2f}', '-')} | {r['loss_at_budget']:.3f} |")
    return lines


def lm_markdown(rows: Sequence[dict], target: float, header: str = "", baseline: str = "ddp") -> str:
    lines = [header] if header else []
    for network in dict.fromkeys(r["network"] for r in rows):
        group = [r for r in rows if r["network"] == network]
        first = next((r for r in group if "curve" in r), None)
        title = (f"{first['model']} ({first['params'] / 1e6:.1f}M parameters), batch {first['batch_size']} x "
                 f"{first['seq_len']} bytes per rank, {first['world_size']} hosts, {first['budget_s']:.0f} s of "
                 f"training per method" if first else "not run")
        if first and first.get("link"):
            title += f"; link: {first['link']}"
        if first and first.get("sharded"):
            title = title.replace(f"{first['world_size']} hosts", f"{first['hosts']} hosts x {first['ranks_per_host']} "
                                  f"ranks (FSDP2 inside a host)")
            lines += ["", f"### {network}: {title}", ""] + _sharded_markdown(group, target, baseline)
            continue
        lines += ["", f"### {network}: {title}", "",
                  f"| method | steps/s | MB sent/step/rank | seconds to loss {target} | sooner than DDP (est.: DDP's steps "
                  "elsewhere x its s/step here) | "
                  "samples to target vs DDP | loss at budget |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in group:
            if "curve" not in r:
                lines.append(f"| {r['method']} | failed: {r.get('error', '?')[:80]} | | | | | |")
                continue
            speedup = "-" if r["speedup_vs_ddp"] is None else f"{r['speedup_bound']}{r['speedup_vs_ddp']:.2f}x"
            if r.get("speedup_vs_ddp_estimated") is not None:
                speedup += f" (est. {r['speedup_vs_ddp_estimated']:.1f}x)"
            lines.append(f"| {r['method']} | {r['steps_per_s']:.2f} | {r['mb_per_step']:.2f} | "
                         f"{_fmt(r['seconds_to_target'], '{:.0f}')} | {speedup} | "
                         f"{_fmt(r['samples_vs_ddp'], '{:.2f}x', '-')} | {r['loss_at_budget']:.3f} |")
    return "\n".join(lines) + "\n"


def _plot(rows: Sequence[dict], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    networks = list(dict.fromkeys(r["network"] for r in rows))
    fig, axes = plt.subplots(1, len(networks), figsize=(6 * len(networks), 4.5), squeeze=False)
    for ax, network in zip(axes[0], networks):
        for r in rows:
            if r["network"] == network and "curve" in r:
                ax.plot([p["seconds"] for p in r["curve"]], [p["loss"] for p in r["curve"]], label=r["method"],
                        linestyle="--" if r.get("ddp") else "-")
        ax.axhline(target, color="grey", linewidth=0.8)
        ax.set(title=network, xlabel="training seconds", ylabel="validation loss (nats/byte)")
        ax.set_ylim(top=min(4.0, ax.get_ylim()[1]))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_lm(rows: Sequence[dict], target: float, results: Path, header: str = "", name: str = "lm",
             baseline: str = "ddp") -> list[Path]:
    """``results/<name>.md``, ``.json`` and ``.png``; speedups against ``baseline``."""
    results.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows, target, baseline)
    paths = [results / f"{name}.md", results / f"{name}.json"]
    paths[0].write_text(lm_markdown(summary, target, header, baseline))
    paths[1].write_text(json.dumps({"target_loss": target, "header": header, "baseline": baseline, "rows": summary},
                                   indent=1))
    if have_matplotlib() and any("curve" in r for r in rows):
        _plot(rows, target, results / f"{name}.png")
        paths.append(results / f"{name}.png")
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="rewrite lm.md and lm.png from an lm.json")
    parser.add_argument("json")
    parser.add_argument("--target", type=float, default=None, help="another target loss")
    args = parser.parse_args(argv)
    data = json.loads(Path(args.json).read_text())
    target = data["target_loss"] if args.target is None else args.target
    for path in write_lm(data["rows"], target, Path(args.json).parent, data.get("header", ""), Path(args.json).stem,
                         data.get("baseline", "ddp")):
        print("wrote", path)


if __name__ == "__main__":
    main()
