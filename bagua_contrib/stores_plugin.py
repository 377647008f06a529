"""Built-in cache stores, registered through the same hook a third-party store package implements::

    @hookimpl
    def bagua_register_cache_stores():
        return [MyStore]          # MyStore.name == "my-store" -> CachedDataset(ds, backend="my-store")

This plugin also adds the hook's spec (:mod:`bagua_contrib.hookspecs`): the contract is bagua_contrib's.
"""

from __future__ import annotations

from bagua_contrib import hookspecs
from bagua_core.plugins import hookimpl

__all__ = ["bagua_add_hookspecs", "bagua_register_cache_stores"]


@hookimpl
def bagua_add_hookspecs(plugin_manager) -> None:
    plugin_manager.add_hookspecs(hookspecs)


@hookimpl
def bagua_register_cache_stores() -> list[type]:
    from bagua_contrib.utils.redis_store import RedisStore

    return [RedisStore]
