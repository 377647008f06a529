"""The fused optimizer's former home: it lives in :mod:`bagua_contrib.fused_optimizer` now (with the feature
``fused_optimizer``); this package re-exports its names, the same objects, so imports of
``bagua_contrib.fuse`` keep working.

Example::

    >>> from bagua_contrib.fuse import fuse_optimizer      # bagua_contrib.fused_optimizer.fuse_optimizer
"""

from __future__ import annotations

from bagua_contrib.fused_optimizer.optimizer import (
    FuseState,
    fuse_optimizer,
    fuse_state_of,
    fuse_step,
    is_fused_optimizer,
)

__all__ = ["FuseState", "fuse_optimizer", "fuse_state_of", "fuse_step", "is_fused_optimizer"]
