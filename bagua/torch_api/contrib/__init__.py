"""Contributed features: cached datasets, load-balancing samplers, fused optimizer."""

from __future__ import annotations

from bagua_contrib.cache_loader import CacheLoader
from bagua_contrib.cached_dataset import CachedDataset
from bagua_contrib.fuse.optimizer import fuse_optimizer
from bagua_contrib.load_balancing_data_loader import (
    LoadBalancingDistributedBatchSampler,
    LoadBalancingDistributedSampler,
)
from bagua.torch_api.contrib import fuse, utils  # noqa: E402

__all__ = [
    "CacheLoader", "CachedDataset", "LoadBalancingDistributedBatchSampler", "LoadBalancingDistributedSampler",
    "fuse", "fuse_optimizer", "utils",
]
