"""Gating and the sharded MoE layer."""

from __future__ import annotations

from bagua_contrib.moe.gating import gumbel_rsample, multiplicative_jitter, top1gating, top2gating
from bagua_contrib.moe.sharded_moe import MOELayer, TopKGate

__all__ = ["MOELayer", "TopKGate", "gumbel_rsample", "multiplicative_jitter", "top1gating", "top2gating"]
