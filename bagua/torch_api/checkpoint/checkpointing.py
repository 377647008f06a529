"""``save_checkpoint`` / ``load_checkpoint``."""

from __future__ import annotations

from bagua_features.checkpoints.checkpoint import load_checkpoint, save_checkpoint

__all__ = ["load_checkpoint", "save_checkpoint"]
