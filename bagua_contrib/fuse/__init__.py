"""Fused optimizer: one optimizer step over contiguous flat tensors instead of one per parameter."""

from __future__ import annotations

from bagua_contrib.fuse.optimizer import fuse_optimizer, fuse_step, is_fused_optimizer

__all__ = ["fuse_optimizer", "fuse_step", "is_fused_optimizer"]
