"""``MoE``."""

from __future__ import annotations

from bagua_contrib.moe.layer import MoE

__all__ = ["MoE"]
