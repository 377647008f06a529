"""Built-in cache stores, registered through the same hook a third-party store package implements::

    @hookimpl
    def bagua_register_cache_stores():
        return [MyStore]          # MyStore.name == "my-store" -> CachedDataset(ds, backend="my-store")
"""

from __future__ import annotations

from bagua_core.plugins import hookimpl

__all__ = ["bagua_register_cache_stores"]


@hookimpl
def bagua_register_cache_stores() -> list[type]:
    from bagua_contrib.utils.redis_store import RedisStore

    return [RedisStore]
