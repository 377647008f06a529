"""``BaguaTensor``: the methods bagua adds to every ``torch.Tensor``."""

from __future__ import annotations

from bagua_core.lifecycle.tensor import BaguaTensor

__all__ = ["BaguaTensor"]
