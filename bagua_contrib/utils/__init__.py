"""Cache stores (``Store``, ``ClusterStore``, ``RedisStore``) and the pickle-free sample serialisation."""

from __future__ import annotations

from bagua_contrib.utils.store import ClusterStore, Store, StoreUnavailableError

__all__ = ["ClusterStore", "Store", "StoreUnavailableError"]
