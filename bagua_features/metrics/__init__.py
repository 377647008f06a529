"""Metrics of a wrapped module where users look: per step and per round, and TensorBoard.

``step_metrics`` (the collector a wrapped module keeps while ``model.bagua_metrics()`` has asked for it: per
step the training thread's seconds in bagua's hooks, the bytes handed to collectives and the loss the script
notes; per round the compression ratio and, in fault-tolerant mode, the failures, restarts and heals this
replica saw) and ``tensorboard`` (the writer of those records, on ``torch.utils.tensorboard``; the
``tensorboard`` package is an optional extra). Imports the runtime's counters, the lifecycle and fault-tolerant
mode's counters; never the wrapped module or the CLI. Nothing here issues a collective.
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_features.metrics.step_metrics import RoundRecord, StepMetrics, StepRecord
from bagua_features.metrics.tensorboard import TensorBoardWriter, require_tensorboard

__all__ = ["MetricsFeature", "RoundRecord", "StepMetrics", "StepRecord", "TensorBoardWriter", "bagua_register_features",
           "metrics", "require_tensorboard"]


@hookimpl
def bagua_register_features() -> list[type]:
    """The feature ``metrics`` (:mod:`.feature`)."""
    return [MetricsFeature]


from bagua_features.metrics.feature import MetricsFeature, metrics  # noqa: E402  (it imports the records above)
