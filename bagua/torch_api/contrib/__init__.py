"""Contributed features: cached datasets, load-balancing samplers, fused optimizer."""

from __future__ import annotations

from bagua_contrib.cached_dataset import CacheLoader, CachedDataset
from bagua_contrib.load_balancing_sampler import (
    LoadBalancingDistributedBatchSampler,
    LoadBalancingDistributedSampler,
)
from bagua.torch_api.contrib.fuse.optimizer import fuse_optimizer  # noqa: E402
from bagua.torch_api.contrib import (  # noqa: E402
    cache_loader,
    cached_dataset,
    fuse,
    load_balancing_data_loader,
    sync_batchnorm,
    utils,
)

__all__ = [
    "CacheLoader", "CachedDataset", "LoadBalancingDistributedBatchSampler", "LoadBalancingDistributedSampler",
    "cache_loader", "cached_dataset", "fuse", "fuse_optimizer", "load_balancing_data_loader",
    "sync_batchnorm", "utils",
]
