"""``Experts``."""

from __future__ import annotations

from bagua_contrib.moe.experts import Experts

__all__ = ["Experts"]
