"""The cached dataset, and the feature ``cached_dataset``: samples read once, then served from a cache store
shared by the ranks of a node.

``dataset`` (``CachedDataset``), ``cache_loader`` (``CacheLoader``: the read-through cache over a store found
by name) and ``feature`` (the dataset of ``model.bagua_data_loader`` wrapped in a ``CachedDataset``). The
stores are plugins of their own: :mod:`bagua_contrib.hookspecs`, :mod:`bagua_contrib.utils`.

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce",
    ...                          features={"cached_dataset": {"dataset_name": "train"}})
    >>> loader = model.bagua_data_loader(slow_dataset, batch_size=32)    # loader.dataset is a CachedDataset
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_contrib.cached_dataset.cache_loader import CacheLoader
from bagua_contrib.cached_dataset.dataset import CachedDataset
from bagua_contrib.cached_dataset.feature import CachedDatasetConfig, CachedDatasetFeature

__all__ = ["CacheLoader", "CachedDataset", "CachedDatasetConfig", "CachedDatasetFeature",
           "bagua_register_features"]


@hookimpl
def bagua_register_features() -> list[type]:
    """The feature ``cached_dataset`` (:mod:`.feature`)."""
    return [CachedDatasetFeature]
