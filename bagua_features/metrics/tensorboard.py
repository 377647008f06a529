"""``TensorBoardWriter``: the metrics of a wrapped module as TensorBoard scalars, through
``torch.utils.tensorboard.SummaryWriter`` (the ``tensorboard`` package: ``pip install "bagua[tensorboard]"``).

Tags (the x axis of every one is the module's training step, ``bagua_train_step_counter``):

- ``step/exposed_comm_s``: seconds the training thread spent in bagua's hooks during the step;
- ``step/bytes``: bytes this process handed to collectives during the step;
- ``step/loss``: the loss the script noted for the step (``StepMetrics.note_loss``), when it did;
- ``round/compression_ratio``: full-precision bytes of the round over the bytes handed to collectives for it;
- ``round/bytes``: bytes handed to collectives since the round before;
- ``ft/steps_discarded``, ``ft/replicas_lost``, ``ft/replicas_joined``, ``ft/heals`` (fault-tolerant mode, at each
  round: this replica's counts so far);
- ``ft/stall_s/replica_lost``, ``ft/stall_s/step_failed``, ``ft/stall_s/quorum_changed`` (a fault this replica
  survived, by its cause: the seconds from the commit before it to the first after) and ``ft/heal_s`` (a heal of this replica), at the step they were seen.

Example::

    >>> writer = TensorBoardWriter("runs/digits")
    >>> metrics = model.bagua_metrics(sink=writer)      # what model.bagua_metrics(log_dir=...) does on rank 0
"""

from __future__ import annotations

import importlib.util
import math
import os

from bagua_features.metrics.step_metrics import RoundRecord, StepRecord
from bagua_core.runtime.exceptions import BaguaConfigError

__all__ = ["TensorBoardWriter", "require_tensorboard"]

FT_TAGS = {"steps_discarded": "ft/steps_discarded", "replicas_lost": "ft/replicas_lost",
           "replicas_joined": "ft/replicas_joined", "heals": "ft/heals"}


def require_tensorboard() -> None:
    """Raise ``BaguaConfigError`` saying what to install when the ``tensorboard`` package is missing; else import
    torch's writer (seconds: every rank calls this, so the one that writes does not start its steps late)."""
    if importlib.util.find_spec("tensorboard") is None:
        raise BaguaConfigError(
            "writing metrics to TensorBoard needs the tensorboard package, which is not installed: "
            "pip install \"bagua[tensorboard]\" (or pip install tensorboard)")
    import torch.utils.tensorboard  # noqa: F401


class TensorBoardWriter:
    """Writes the records a ``StepMetrics`` hands it as scalars under ``log_dir`` (created if missing)."""

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter  # imported only when asked: it takes a while

        self.log_dir = os.fspath(log_dir)
        self._writer = SummaryWriter(log_dir=self.log_dir)

    def write_step(self, record: StepRecord) -> None:
        self._writer.add_scalar("step/exposed_comm_s", record.exposed_comm_s, record.step)
        self._writer.add_scalar("step/bytes", record.bytes, record.step)
        if record.loss is not None:
            self._writer.add_scalar("step/loss", record.loss, record.step)

    def write_round(self, record: RoundRecord) -> None:
        if math.isfinite(record.compression_ratio):
            self._writer.add_scalar("round/compression_ratio", record.compression_ratio, record.step)
        self._writer.add_scalar("round/bytes", record.bytes, record.step)
        for key, tag in FT_TAGS.items():
            if record.fault_tolerance is not None:
                self._writer.add_scalar(tag, record.fault_tolerance[key], record.step)

    def write_faults(self, step: int, faults: list[dict]) -> None:
        for fault in faults:
            if "stall_s" in fault:
                self._writer.add_scalar(f"ft/stall_s/{fault['kind']}", fault["stall_s"], step)
            if "heal_s" in fault:
                self._writer.add_scalar("ft/heal_s", fault["heal_s"], step)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __repr__(self) -> str:
        return f"TensorBoardWriter({self.log_dir!r})"

