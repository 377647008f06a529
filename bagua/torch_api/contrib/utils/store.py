"""``Store`` and ``ClusterStore``."""

from __future__ import annotations

from bagua_contrib.utils.store import ClusterStore, Store

__all__ = ["ClusterStore", "Store"]
