"""Contributed features built on bagua_core, each a package with its feature plugin: ``fused_optimizer``,
``sync_batchnorm``, ``load_balancing_sampler``, ``cached_dataset`` and ``moe`` (selected by name:
``with_bagua(..., features={"sync_batchnorm": {}})``); and the Lightning strategy
(:mod:`bagua_contrib.lightning`).

Names are imported on first use (``import bagua_contrib`` stays cheap and does not need redis)::

    from bagua_contrib import CachedDataset, LoadBalancingDistributedSampler, fuse_optimizer, SyncBatchNorm
    from bagua_contrib.moe import MoE
    from bagua_contrib.utils.redis_store import RedisStore

Cache store backends are plugins (hook ``bagua_register_cache_stores``); ``backend="redis"`` is the built-in
one, registered by :mod:`bagua_contrib.stores_plugin`. The former modules ``bagua_contrib.fuse``,
``bagua_contrib.load_balancing_data_loader`` and ``bagua_contrib.cache_loader`` re-export their names from the
packages.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CachedDataset": "bagua_contrib.cached_dataset",
    "CacheLoader": "bagua_contrib.cached_dataset",
    "LoadBalancingDistributedSampler": "bagua_contrib.load_balancing_sampler",
    "LoadBalancingDistributedBatchSampler": "bagua_contrib.load_balancing_sampler",
    "fuse_optimizer": "bagua_contrib.fused_optimizer",
    "fuse_step": "bagua_contrib.fused_optimizer",
    "is_fused_optimizer": "bagua_contrib.fused_optimizer",
    "SyncBatchNorm": "bagua_contrib.sync_batchnorm",
    "MoE": "bagua_contrib.moe",
    "is_moe_param": "bagua_contrib.moe",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bagua_contrib' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
