"""The fused optimizer."""

from __future__ import annotations

from bagua.torch_api.contrib.fuse import optimizer

__all__ = ["optimizer"]
