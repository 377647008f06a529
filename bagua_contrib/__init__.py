"""Contributed features built on bagua_core: cached datasets, samplers, fused optimizer, SyncBatchNorm, MoE.

Names are imported on first use (``import bagua_contrib`` stays cheap and does not need redis)::

    from bagua_contrib import CachedDataset, LoadBalancingDistributedSampler, fuse_optimizer, SyncBatchNorm
    from bagua_contrib.moe import MoE
    from bagua_contrib.utils.redis_store import RedisStore

Cache store backends are plugins (hook ``bagua_register_cache_stores``); ``backend="redis"`` is the
built-in one, registered by :mod:`bagua_contrib.stores_plugin`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CachedDataset": "bagua_contrib.cached_dataset",
    "CacheLoader": "bagua_contrib.cache_loader",
    "LoadBalancingDistributedSampler": "bagua_contrib.load_balancing_data_loader",
    "LoadBalancingDistributedBatchSampler": "bagua_contrib.load_balancing_data_loader",
    "fuse_optimizer": "bagua_contrib.fuse.optimizer",
    "fuse_step": "bagua_contrib.fuse.optimizer",
    "is_fused_optimizer": "bagua_contrib.fuse.optimizer",
    "SyncBatchNorm": "bagua_contrib.sync_batchnorm",
    "MoE": "bagua_contrib.moe",
    "is_moe_param": "bagua_contrib.moe",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bagua_contrib' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
