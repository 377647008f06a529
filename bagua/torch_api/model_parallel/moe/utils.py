"""``is_moe_param``."""

from __future__ import annotations

from bagua_contrib.moe.utils import is_moe_param

__all__ = ["is_moe_param"]
