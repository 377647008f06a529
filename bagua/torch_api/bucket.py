"""``BaguaBucket``: tensors communicated together, with the ops an algorithm appends."""

from __future__ import annotations

from bagua_core.lifecycle.bucket import BaguaBucket

__all__ = ["BaguaBucket"]
