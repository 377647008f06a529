"""Checkpoints (MoE-aware)."""

from __future__ import annotations

from bagua.torch_api.checkpoint.checkpointing import load_checkpoint, save_checkpoint

__all__ = ["load_checkpoint", "save_checkpoint"]
