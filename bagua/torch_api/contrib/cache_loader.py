"""``CacheLoader``: values cached in a key-value store under ``"{dataset_name}_{key}"``."""

from __future__ import annotations

from bagua_contrib.cached_dataset import CacheLoader

__all__ = ["CacheLoader"]
