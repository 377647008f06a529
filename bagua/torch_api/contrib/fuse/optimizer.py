"""``fuse_optimizer``, ``fuse_step``, ``is_fused_optimizer``, ``calculate_mutual_groups``."""

from __future__ import annotations

from bagua_contrib.fuse.optimizer import calculate_mutual_groups, fuse_optimizer, fuse_step, is_fused_optimizer

__all__ = ["calculate_mutual_groups", "fuse_optimizer", "fuse_step", "is_fused_optimizer"]
