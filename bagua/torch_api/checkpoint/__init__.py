"""Checkpoints (MoE-aware)."""

from __future__ import annotations

from bagua.torch_api.checkpoint import checkpointing
from bagua.torch_api.checkpoint.checkpointing import load_checkpoint, save_checkpoint

__all__ = ["checkpointing", "load_checkpoint", "save_checkpoint"]
