"""The feature ``sync_batchnorm``: the model's ``BatchNorm*d`` layers converted to :class:`SyncBatchNorm` when
the module is wrapped (before the wrap broadcasts rank 0's weights and builds the buckets), keeping their
parameters, running statistics and mode: exactly what ``SyncBatchNorm.convert_sync_batchnorm(model)`` by hand
before the wrap does. Each layer then normalises over the batch of every rank of bagua's default group.

A model that is itself a BatchNorm layer is refused on every rank (the wrap cannot replace the module it
returns: convert it by hand); a model without any BatchNorm layer is wrapped as it is, with a warning (logger
``bagua.contrib``).

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce", features={"sync_batchnorm": {}})
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import torch

from bagua_core.api import BaguaConfigError, Feature, FeatureConfig
from bagua_contrib.sync_batchnorm.layer import SyncBatchNorm

__all__ = ["SyncBatchNormConfig", "SyncBatchNormFeature"]

logger = logging.getLogger("bagua.contrib")

_BatchNorm = torch.nn.modules.batchnorm._BatchNorm


class SyncBatchNormConfig(FeatureConfig):
    name: Literal["sync_batchnorm"] = "sync_batchnorm"
    """The feature's name."""


class SyncBatchNormFeature(Feature):
    """The model's BatchNorm layers converted to ``SyncBatchNorm`` at the wrap, as ``convert_sync_batchnorm``
    (module doc)."""

    name = "sync_batchnorm"
    Config = SyncBatchNormConfig

    def check(self, module: torch.nn.Module, algorithm: Any) -> None:
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            raise BaguaConfigError(
                f"feature 'sync_batchnorm' converts the BatchNorm layers inside the wrapped model, and this "
                f"model is one ({type(module).__name__}): convert it by hand, model = "
                f"SyncBatchNorm.convert_sync_batchnorm(model), and wrap what that returns without the "
                f"feature")
        if not any(isinstance(layer, _BatchNorm) for layer in module.modules()):
            logger.warning("feature 'sync_batchnorm': %s has no BatchNorm layer to convert; it is wrapped "
                           "as it is", type(module).__name__)

    def setup(self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        SyncBatchNorm.convert_sync_batchnorm(module)  # in place below the root (checked: not a BatchNorm)
