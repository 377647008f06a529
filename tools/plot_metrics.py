"""Plot the scalars ``bagua train --tensorboard DIR`` (or ``model.bagua_metrics(log_dir=DIR)``) wrote: the picture
of docs/usage.md#metrics-and-tensorboard.

    python tools/plot_metrics.py DIR docs/metrics_tensorboard.png

Needs matplotlib (the ``bench`` extra) and tensorboard (the ``tensorboard`` extra).
"""

from __future__ import annotations

import sys

PANELS = [("step/loss", "loss"), ("step/exposed_comm_s", "exposed communication (s)"),
          ("step/bytes", "bytes handed to collectives"), ("round/compression_ratio", "compression ratio per round")]


def main(log_dir: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(log_dir)
    accumulator.Reload()
    figure, axes = plt.subplots(2, 2, figsize=(8, 4.6), sharex=True)
    for ax, (tag, title) in zip(axes.flat, PANELS):
        events = accumulator.Scalars(tag)
        ax.plot([e.step for e in events], [e.value for e in events], "o-" if tag.startswith("round/") else "-",
                markersize=3, linewidth=1)
        ax.set_title(f"{title}\n{tag}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("training step", fontsize=8)
    figure.tight_layout()
    figure.savefig(out, dpi=80)


if __name__ == "__main__":
    main(*sys.argv[1:3])
