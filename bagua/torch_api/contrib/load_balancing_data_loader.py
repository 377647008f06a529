"""Samplers that balance the work of each rank by sample complexity."""

from __future__ import annotations

from bagua_contrib.load_balancing_sampler import (
    LoadBalancingDistributedBatchSampler,
    LoadBalancingDistributedSampler,
)

__all__ = ["LoadBalancingDistributedBatchSampler", "LoadBalancingDistributedSampler"]
