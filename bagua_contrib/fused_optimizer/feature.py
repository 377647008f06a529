"""The feature ``fused_optimizer``: every optimizer given to ``with_bagua`` fused (:func:`fuse_optimizer`)
when the module is wrapped, before the wrap broadcasts rank 0's weights and builds the buckets: exactly what
``fuse_optimizer(optimizer, do_flatten, check_flatten)`` by hand before the wrap does. The script then steps
it with ``optimizer.fuse_step()``, as by hand; a plain ``optimizer.step()`` stays the unfused step. An
optimizer already fused (by hand, or by the wrap before a re-wrap) is left as it is.

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce", do_flatten=False,
    ...                          features={"fused_optimizer": {}})
    >>> loss.backward(); optimizer.fuse_step()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from bagua_core.api import Feature, FeatureConfig
from bagua_contrib.fused_optimizer.optimizer import fuse_optimizer, is_fused_optimizer

__all__ = ["FusedOptimizerConfig", "FusedOptimizerFeature"]


class FusedOptimizerConfig(FeatureConfig):
    name: Literal["fused_optimizer"] = "fused_optimizer"
    """The feature's name."""
    do_flatten: bool = True
    """Lay every param group's parameters and gradients out in flat buffers when the module is wrapped (False:
    fuse only the parameters already contiguous)."""
    check_flatten: bool = True
    """Before each fused step, copy back into the buffers whatever was moved out of them."""


class FusedOptimizerFeature(Feature):
    """Every optimizer given to ``with_bagua`` fused at the wrap, as ``fuse_optimizer``; step it with
    ``optimizer.fuse_step()`` (module doc)."""

    name = "fused_optimizer"
    Config = FusedOptimizerConfig

    def setup(self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        for optimizer in optimizers:
            if not is_fused_optimizer(optimizer):  # (a re-wrap keeps the optimizers fused before)
                fuse_optimizer(optimizer, self.config.do_flatten, self.config.check_flatten)
