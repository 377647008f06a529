"""The feature ``cached_dataset``: the dataset of the data loader a wrapped module trains on
(``model.bagua_data_loader(dataset, batch_size)``) wrapped in a :class:`CachedDataset`: each sample is read
once and served from the cache store afterwards, on every rank of the node: exactly what
``CachedDataset(dataset, backend, dataset_name, writer_buffer_size, **store)`` by hand gives. The store
backends are plugins of their own (hook ``bagua_register_cache_stores``; ``redis`` is built in): an unknown
``backend`` is refused, with a guess, on every rank before the first collective. The loader's dataset is the
``CachedDataset``: release its store with ``loader.dataset.cache_loader.shutdown()`` when done, as by hand.

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce", features={"cached_dataset": {
    ...     "dataset_name": "train", "store": {"capacity_per_node": 1 << 30}}})
    >>> loader = model.bagua_data_loader(slow_dataset, batch_size=32)
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field
from torch.utils.data import Dataset

from bagua_core.api import Feature, FeatureConfig
from bagua_contrib.cached_dataset.dataset import CachedDataset
from bagua_contrib.hookspecs import cache_store_registry

__all__ = ["CachedDatasetConfig", "CachedDatasetFeature"]


class CachedDatasetConfig(FeatureConfig):
    name: Literal["cached_dataset"] = "cached_dataset"
    """The feature's name."""
    backend: str = "redis"
    """The cache store, by its registered name (``bagua plugins`` lists the cache stores)."""
    dataset_name: str = ""
    """Keys are ``"{dataset_name}_{index}"``: datasets sharing a store need different names."""
    writer_buffer_size: int = Field(20, ge=1)
    """Writes are sent this many at a time."""
    store: dict[str, Any] = Field(default_factory=dict)
    """The store's own options (redis: ``hosts``, ``cluster_mode``, ``capacity_per_node``)."""


class CachedDatasetFeature(Feature):
    """The dataset of ``model.bagua_data_loader`` wrapped in a ``CachedDataset``: each sample read once, then
    served from a cache store (module doc)."""

    name = "cached_dataset"
    Config = CachedDatasetConfig

    def check(self, module: torch.nn.Module, algorithm: Any) -> None:
        cache_store_registry.get(self.config.backend)  # an unknown store: UnknownNameError with a guess

    def dataset(self, module: torch.nn.Module, dataset: Dataset) -> Dataset:
        config = self.config
        return CachedDataset(dataset, config.backend, config.dataset_name, config.writer_buffer_size,
                             **config.store)
