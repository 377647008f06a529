"""Mixture of experts with experts sharded over ranks (alltoall dispatch, top-1/top-2 gating)."""

from __future__ import annotations

from bagua_contrib.moe.experts import Experts
from bagua_contrib.moe.layer import MoE
from bagua_contrib.moe.sharded_moe import MOELayer, TopKGate
from bagua_contrib.moe.utils import ignore_moe_params, is_moe_param, moe_param_names

__all__ = ["Experts", "MOELayer", "MoE", "TopKGate", "ignore_moe_params", "is_moe_param", "moe_param_names"]
