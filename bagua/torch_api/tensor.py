"""``BaguaTensor``: the methods bagua adds to every ``torch.Tensor``."""

from __future__ import annotations

from bagua_core.tensor import BaguaTensor

__all__ = ["BaguaTensor"]
