"""The metrics as the feature ``metrics``: selected by name (``features={"metrics": {"log_dir": "runs"}}``,
``bagua train --tensorboard DIR``) or turned on after the wrap by ``model.bagua_metrics()``, which it adds to every
wrapped module. It counts the seconds in bagua's hooks (``WrappedModule.count_hook_seconds``), opens a step's record
at each training forward and closes it once every optimizer stepped; it issues no collective.

Example::

    >>> model = model.with_bagua([optimizer], "bytegrad", features={"metrics": {"log_dir": "runs/digits"}})
    >>> model.bagua_metrics().totals()["bytes"]         # the same records
    1320
"""

from __future__ import annotations

import functools
import os
from typing import Any, Literal

import torch
from pydantic import Field

from bagua_core.lifecycle.feature import Feature, FeatureConfig
from bagua_features.metrics.step_metrics import StepMetrics
from bagua_features.metrics.tensorboard import TensorBoardWriter, require_tensorboard
from bagua_core.api import WrappedModule
from bagua_core.runtime import env
from bagua_core.runtime.exceptions import BaguaError

__all__ = ["MetricsConfig", "MetricsFeature", "metrics"]


class MetricsConfig(FeatureConfig):
    name: Literal["metrics"] = "metrics"
    """The feature's name."""
    log_dir: str | None = None
    """Rank 0 writes the records as TensorBoard scalars there (every rank checks that the ``tensorboard`` package
    is installed); None: nothing written, the records are kept (``model.bagua_metrics()``)."""
    history: int = Field(10_000, ge=1)
    """How many of the last steps and rounds the records keep (their totals count every one)."""


class MetricsFeature(Feature):
    """What each training step and each round of the module costs (``bagua_features.metrics.StepMetrics``)."""

    name = "metrics"
    Config = MetricsConfig
    module_attributes = {"bagua_metrics": lambda module: functools.partial(metrics, module)}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.records = StepMetrics(self.config.history)
        self._writing: str | None = None

    def write_to(self, log_dir: str | os.PathLike[str]) -> None:
        """Rank 0 writes the records as TensorBoard scalars to ``log_dir`` too (every rank checks the package)."""
        require_tensorboard()
        if env.get_rank() == 0 and self._writing != str(log_dir):
            self.records.sinks.append(TensorBoardWriter(log_dir))
            self._writing = str(log_dir)

    def wrapped(self, module: torch.nn.Module) -> None:
        WrappedModule(module).count_hook_seconds()
        if self.config.log_dir is not None:
            self.write_to(self.config.log_dir)

    def before_forward(self, module: torch.nn.Module) -> bool:
        wrapped = WrappedModule(module)
        if self.records.open_step is not None:  # the step before ended without every optimizer stepping
            self.records.end_step(wrapped.train_step_counter - 1, wrapped.take_hook_seconds(), wrapped.impl,
                                  wrapped.buckets)
        self.records.begin_step(wrapped.train_step_counter)
        return False

    def after_step(self, module: torch.nn.Module) -> None:
        wrapped = WrappedModule(module)
        self.records.end_step(wrapped.train_step_counter, wrapped.take_hook_seconds(), wrapped.impl, wrapped.buckets)

    def unwrap(self, module: torch.nn.Module) -> None:
        self.records.flush()  # the last step's record reaches the sinks


def metrics(module: torch.nn.Module, log_dir: str | os.PathLike[str] | None = None, *,
            history: int = 10_000, sink: Any = None) -> StepMetrics:
    """``module.bagua_metrics()``: record, from now on, what each training step and each round of the wrapped
    ``module`` costs, and return the records (``bagua_features.metrics.StepMetrics``): per step the training thread's
    seconds in bagua's hooks (``exposed_comm_s``), the bytes handed to collectives and the loss noted with
    ``note_loss``; per round the compression ratio and, in fault-tolerant mode, failures, restarts and heals.
    ``log_dir``: rank 0 also writes them as TensorBoard scalars there (every rank checks that the ``tensorboard``
    package is installed, and raises ``BaguaConfigError`` naming it if not); ``sink``: any object with
    ``write_step``, ``write_round``, ``flush`` and ``close``, optionally ``write_faults`` (every rank's, as given). Called again, it returns the
    same records, adding the writer or sink given. Until it is called (or the feature selected) the hooks measure
    nothing; it issues no collective.

    Example::

        >>> metrics = model.bagua_metrics(log_dir="runs/digits")
        >>> for x, y in batches:
        ...     loss = F.cross_entropy(model(x), y); loss.backward(); optimizer.step()
        ...     metrics.note_loss(loss)
        >>> metrics.close(); metrics.totals()["exposed_comm_s"]
        0.42
    """
    if not WrappedModule.is_wrapped(module):
        raise BaguaError(f"bagua_metrics: {type(module).__name__} is not wrapped (call with_bagua first)")
    wrapped = WrappedModule(module)
    feature = next((f for f in wrapped.features if isinstance(f, MetricsFeature)), None)
    if log_dir is not None:
        require_tensorboard()
    if feature is None:
        feature = MetricsFeature(history=history)
        wrapped.add_feature(feature)
    if log_dir is not None:
        feature.write_to(log_dir)
    if sink is not None:
        feature.records.sinks.append(sink)
    return feature.records
