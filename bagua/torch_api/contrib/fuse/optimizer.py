"""``fuse_optimizer``, ``fuse_step``, ``is_fused_optimizer``, ``calculate_mutual_groups``, as the original's:
an optimizer fused here also has the original's ``optimizer._bagua_fused_count``, kept equal after every
fused step to what ``bagua_contrib.fused_optimizer`` counts (``fuse_state_of(optimizer).fused_count``).

Example::

    >>> optimizer = fuse_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    >>> loss.backward(); optimizer.fuse_step()
    >>> optimizer._bagua_fused_count
    1
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch

from bagua_contrib.fused_optimizer import optimizer as _fuse
from bagua_contrib.fused_optimizer.optimizer import calculate_mutual_groups, fuse_state_of, is_fused_optimizer

__all__ = ["calculate_mutual_groups", "fuse_optimizer", "fuse_step", "is_fused_optimizer"]


def fuse_optimizer(optimizer: torch.optim.Optimizer, do_flatten: bool = True,
                   check_flatten: bool = True) -> torch.optim.Optimizer:
    """``bagua_contrib.fused_optimizer.fuse_optimizer``, with the original's ``_bagua_fused_count``."""
    _fuse.fuse_optimizer(optimizer, do_flatten, check_flatten)
    optimizer._bagua_fused_count = 0
    optimizer.fuse_step = types.MethodType(fuse_step, optimizer)
    return optimizer


def fuse_step(optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
    """``bagua_contrib.fused_optimizer.fuse_step``, then the original's ``_bagua_fused_count`` brought up to
    date."""
    try:
        return _fuse.fuse_step(optimizer, closure)
    finally:
        state = fuse_state_of(optimizer)
        if state is not None:
            optimizer._bagua_fused_count = state.fused_count
