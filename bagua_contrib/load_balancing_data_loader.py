"""Former home of the load-balancing samplers: they live in
:mod:`bagua_contrib.load_balancing_sampler.samplers` now (with the feature ``load_balancing_sampler``); this
module re-exports them, the same objects.

Example::

    >>> from bagua_contrib.load_balancing_data_loader import LoadBalancingDistributedSampler
"""

from __future__ import annotations

from bagua_contrib.load_balancing_sampler.samplers import (
    LoadBalancingDistributedBatchSampler,
    LoadBalancingDistributedSampler,
)

__all__ = ["LoadBalancingDistributedBatchSampler", "LoadBalancingDistributedSampler"]
