"""``CachedDataset``: a dataset whose samples are cached in a store."""

from __future__ import annotations

from bagua_contrib.cached_dataset import CachedDataset

__all__ = ["CachedDataset"]
