"""``BaguaModule``: the methods bagua adds to every ``torch.nn.Module`` (``with_bagua`` ...)."""

from __future__ import annotations

from bagua_core.module import BaguaModule

__all__ = ["BaguaModule"]
