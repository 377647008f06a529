"""Cache stores."""

from __future__ import annotations

from bagua.torch_api.contrib.utils import redis_store, store

__all__ = ["redis_store", "store"]
