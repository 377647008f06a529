"""What the main job reports of its communication, from the wrapped module's metrics (``model.bagua_metrics()``,
``bagua_features.metrics``): the summary's fields, its line, and the TensorBoard directory of ``--tensorboard``."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import torch

from bagua_features.metrics import StepMetrics

__all__ = ["format_metrics", "metrics_summary", "start_metrics"]


def start_metrics(model: torch.nn.Module, tensorboard: str | None, replica: str | None = None) -> StepMetrics:
    """Record the run's steps and rounds; with ``tensorboard`` rank 0 writes them there (a fault-tolerant job's
    replica ``i`` in ``DIR/replica_i``, each replica having its rank 0)."""
    log_dir = os.path.join(tensorboard, f"replica_{replica}") if tensorboard and replica is not None else tensorboard
    return model.bagua_metrics(log_dir=log_dir)


def metrics_summary(metrics: StepMetrics, elapsed: float, mean: Callable[[float], float]) -> dict[str, Any]:
    """The summary's fields, each averaged over the ranks with ``mean`` (a collective every rank calls alike)."""
    metrics.close()
    totals = metrics.totals()
    exposed = mean(totals["exposed_comm_s"])
    dense, handed = mean(float(totals["dense_bytes"])), mean(float(totals["round_bytes"]))
    return {
        "exposed_comm_s_per_rank": exposed,
        "exposed_comm_fraction": exposed / max(mean(elapsed), 1e-9),
        "rounds": round(mean(float(totals["rounds"]))),
        "compression_ratio": dense / handed if handed > 0 and not math.isnan(handed) else None,
    }


def format_metrics(summary: dict[str, Any]) -> str | None:
    """The summary's line on communication (None for a summary without the fields)."""
    if "exposed_comm_s_per_rank" not in summary:
        return None
    ratio = summary["compression_ratio"]
    rounds = summary["rounds"]
    compression = f", compression {ratio:.2f}x over {rounds} round{'' if rounds == 1 else 's'}" if ratio else ""
    return (f"communication: {summary['exposed_comm_s_per_rank']:.2f} s exposed on the training thread per worker "
            f"({summary['exposed_comm_fraction'] * 100:.1f}% of the run){compression}")
