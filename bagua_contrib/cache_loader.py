"""Former home of ``CacheLoader``: it lives in :mod:`bagua_contrib.cached_dataset.cache_loader` now (with the
feature ``cached_dataset``); this module re-exports it, the same object.

Example::

    >>> from bagua_contrib.cache_loader import CacheLoader     # bagua_contrib.cached_dataset.CacheLoader
"""

from __future__ import annotations

from bagua_contrib.cached_dataset.cache_loader import CacheLoader

__all__ = ["CacheLoader"]
