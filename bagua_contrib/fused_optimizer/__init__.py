"""The fused optimizer, and the feature ``fused_optimizer``: one optimizer step over a few contiguous flat
tensors instead of one per parameter, with exactly the unfused results.

``optimizer`` (``fuse_optimizer``, ``fuse_step``: the implementation), ``flatten`` (the flat buffers and the
runs of contiguous parameters) and ``feature`` (every optimizer given to ``with_bagua`` fused when the module
is wrapped).

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce", do_flatten=False,
    ...                          features={"fused_optimizer": {"check_flatten": True}})
    >>> loss.backward(); optimizer.fuse_step()      # as after fuse_optimizer(optimizer) by hand
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_contrib.fused_optimizer.feature import FusedOptimizerConfig, FusedOptimizerFeature
from bagua_contrib.fused_optimizer.optimizer import (
    FuseState,
    fuse_optimizer,
    fuse_state_of,
    fuse_step,
    is_fused_optimizer,
)

__all__ = ["FuseState", "FusedOptimizerConfig", "FusedOptimizerFeature", "bagua_register_features",
           "fuse_optimizer", "fuse_state_of", "fuse_step", "is_fused_optimizer"]


@hookimpl
def bagua_register_features() -> list[type]:
    """The feature ``fused_optimizer`` (:mod:`.feature`)."""
    return [FusedOptimizerFeature]
