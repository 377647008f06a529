"""Writing benchmark results: markdown tables and (when matplotlib is installed) PNG plots.

Example::

    >>> write_e2e(rows, Path("results"))     # results/e2e.md, e2e.json, and e2e.png if matplotlib loads
"""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Sequence

__all__ = ["e2e_markdown", "write_e2e", "convergence_markdown", "write_convergence", "have_matplotlib"]


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _ratio(row: dict, baseline: dict | None) -> str:
    if baseline is None or "ms_per_step" not in row or "ms_per_step" not in baseline:
        return "-"
    if baseline["method"] == "ddp" and "ratio_ddp" in row:  # several rounds: median and range of the rounds' ratios
        low, high = row["ratio_ddp_range"]
        return f"{row['ratio_ddp']:.2f}x ({low:.2f}-{high:.2f})"
    return f"{row['ms_per_step'] / baseline['ms_per_step']:.2f}x"


def _ms(row: dict) -> str:
    rounds = row.get("rounds_ms")
    if rounds and len(rounds) > 1:
        return f"{row['ms_per_step']:.1f} ({min(rounds):.0f}-{max(rounds):.0f})"
    return f"{row['ms_per_step']:.1f}"


def e2e_markdown(rows: Sequence[dict], header: str = "") -> str:
    """One table per network: ms/step, samples/s, MB sent per step and per rank, ratio to DDP."""
    lines = [header] if header else []
    for network in dict.fromkeys(r["network"] for r in rows):
        group = [r for r in rows if r["network"] == network]
        ddp = next((r for r in group if r["method"] == "ddp" and "ms_per_step" in r), None)
        ddp16 = next((r for r in group if r["method"] == "ddp_fp16" and "ms_per_step" in r), None)
        first = next((r for r in group if "model" in r), None)
        title = (f"{first['model']} ({first['params'] / 1e6:.1f}M parameters), batch {first['batch_size']} per rank, "
                 f"{first['world_size']} hosts" if first else "not run")
        if first and first.get("link"):
            title += f"; link: {first['link']}"
        lines += ["", f"### {network}: {title}", "",
                  "| method | ms/step | samples/s | MB sent/step/rank | CPU ms/step/rank | step time vs DDP | vs DDP+fp16 | loss |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in group:
            if "ms_per_step" not in r:
                lines.append(f"| {r['method']} | failed: {r.get('error', '?')[:80]} | | | | | | |")
                continue
            cpu = f"{r['cpu_ms_per_step']:.0f}" if "cpu_ms_per_step" in r else "-"
            lines.append(f"| {r['method']} | {_ms(r)} | {r['samples_per_s']:.1f} | "
                         f"{r['tx_bytes_per_step'] / 1e6:.2f} | {cpu} | {_ratio(r, ddp)} | {_ratio(r, ddp16)} | "
                         f"{r['loss']:.4f} |")
    return "\n".join(lines) + "\n"


def _plot_e2e(rows: Sequence[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    networks = list(dict.fromkeys(r["network"] for r in rows if "ms_per_step" in r))  # not the ones that failed
    if not networks:
        return
    fig, axes = plt.subplots(1, len(networks), figsize=(4.5 * len(networks), 4.5), squeeze=False)
    for ax, network in zip(axes[0], networks):
        group = [r for r in rows if r["network"] == network and "ms_per_step" in r]
        names = [r["method"] for r in group]
        values = [r["ms_per_step"] for r in group]
        colors = ["tab:gray" if n.startswith("ddp") else "tab:blue" for n in names]
        ax.barh(names, values, color=colors)
        ax.invert_yaxis()
        ax.set_title(network, fontsize=10)
        ax.set_xlabel("ms per step (lower is better)")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:.0f}", va="center", fontsize=8)
    fig.suptitle("bagua vs torch DDP: step time (gray: DDP baselines)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_e2e(rows: Sequence[dict], results: Path, header: str = "") -> list[Path]:
    """Write ``e2e.md``, ``e2e.json`` and, with matplotlib, ``e2e.png`` into ``results``."""
    results.mkdir(parents=True, exist_ok=True)
    written = [results / "e2e.md", results / "e2e.json"]
    written[0].write_text(e2e_markdown(rows, header))
    written[1].write_text(json.dumps([{k: v for k, v in r.items() if k != "log"} for r in rows], indent=2))
    if have_matplotlib():
        _plot_e2e(rows, results / "e2e.png")
        written.append(results / "e2e.png")
    return written


def _seconds_to(curve: list[dict], accuracy: float) -> str:
    hit = next((point["seconds"] for point in curve if point["test_accuracy"] >= accuracy), None)
    return "-" if hit is None else f"{hit:.2f}"


def convergence_markdown(rows: Sequence[dict], header: str = "", target: float = 0.9) -> str:
    """Final loss/accuracy, training seconds, and seconds until the test accuracy first reached ``target``."""
    lines = [header] if header else []
    lines += ["", f"| method | epochs | train seconds | final loss | final test accuracy | seconds to {target:.0%} |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        if "curve" not in row:
            lines.append(f"| {row['method']} | failed: {row.get('error', '?')[:80]} | | | | |")
            continue
        last = row["curve"][-1]
        lines.append(f"| {row['method']} | {last['epoch']} | {last['seconds']:.2f} | {last['loss']:.4f} | "
                     f"{last['test_accuracy']:.3f} | {_seconds_to(row['curve'], target)} |")
    return "\n".join(lines) + "\n"


def _plot_convergence(rows: Sequence[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4.5))
    for row in rows:
        if "curve" not in row:
            continue
        seconds = [0.0] + [p["seconds"] for p in row["curve"]]
        style = "--" if row["method"].startswith("ddp") else "-"
        loss_ax.plot(seconds[1:], [p["loss"] for p in row["curve"]], style, marker=".", label=row["method"])
        acc_ax.plot(seconds[1:], [p["test_accuracy"] for p in row["curve"]], style, marker=".", label=row["method"])
    loss_ax.set(xlabel="training wall-clock seconds", ylabel="mean training loss of the epoch", yscale="log")
    acc_ax.set(xlabel="training wall-clock seconds", ylabel="test accuracy")
    acc_ax.legend(fontsize=8)
    fig.suptitle("Convergence on the digits data (2 workers)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_convergence(rows: Sequence[dict], results: Path, header: str = "") -> list[Path]:
    """Write ``convergence.md``, ``convergence.json`` and, with matplotlib, ``convergence.png``."""
    results.mkdir(parents=True, exist_ok=True)
    written = [results / "convergence.md", results / "convergence.json"]
    written[0].write_text(convergence_markdown(rows, header))
    written[1].write_text(json.dumps([{k: v for k, v in r.items() if k != "log"} for r in rows], indent=2))
    if have_matplotlib():
        _plot_convergence(rows, results / "convergence.png")
        written.append(results / "convergence.png")
    return written
