"""The hook spec bagua_contrib brings to the plugin manager (cache stores), and its registry.

Added by this package's plugin (``bagua_add_hookspecs`` in :mod:`bagua_contrib.stores_plugin`), not by
the core: the contract, :class:`bagua_contrib.utils.store.Store`, lives here.

Example::

    >>> from bagua_core.plugins import hookimpl
    >>> class MyStorePlugin:
    ...     @hookimpl
    ...     def bagua_register_cache_stores(self):
    ...         return [MyStore]           # MyStore.name == "my-store" -> backend="my-store"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bagua_core.plugins import NamedRegistry
from bagua_core.plugins.hookspecs import hookspec

if TYPE_CHECKING:  # pragma: no cover
    from bagua_contrib.utils.store import Store

__all__ = ["bagua_register_cache_stores", "cache_store_registry"]


@hookspec
def bagua_register_cache_stores() -> list[type[Store]]:
    """Return the cache store classes this plugin provides (``CachedDataset(backend=...)``).

    Fires once, when the store registry is first built. Each class sets ``name`` (the ``backend``
    string) and derives from ``bagua_contrib.utils.store.Store``.
    """


cache_store_registry: NamedRegistry = NamedRegistry("cache store", "bagua_register_cache_stores")
