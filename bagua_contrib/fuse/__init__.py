"""Fused optimizer: one optimizer step over contiguous flat tensors instead of one per parameter."""

from __future__ import annotations

from bagua_contrib.fuse.optimizer import FuseState, fuse_optimizer, fuse_state_of, fuse_step, is_fused_optimizer

__all__ = ["FuseState", "fuse_optimizer", "fuse_state_of", "fuse_step", "is_fused_optimizer"]
