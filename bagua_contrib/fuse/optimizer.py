"""Former home of ``fuse_optimizer`` and ``fuse_step``: they live in
:mod:`bagua_contrib.fused_optimizer.optimizer` now; this module re-exports its names, the same objects.

Example::

    >>> from bagua_contrib.fuse.optimizer import fuse_step   # bagua_contrib.fused_optimizer.optimizer's
"""

from __future__ import annotations

from bagua_contrib.fused_optimizer.optimizer import (
    FuseState,
    calculate_mutual_groups,
    fuse_optimizer,
    fuse_state_of,
    fuse_step,
    is_fused_optimizer,
)

__all__ = ["FuseState", "calculate_mutual_groups", "fuse_optimizer", "fuse_state_of", "fuse_step",
           "is_fused_optimizer"]
