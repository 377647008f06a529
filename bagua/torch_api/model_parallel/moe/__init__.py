"""Mixture of experts with experts sharded over ranks."""

from __future__ import annotations

from bagua_contrib.moe import MoE, is_moe_param
from bagua.torch_api.model_parallel.moe import experts, layer, sharded_moe, utils  # noqa: E402

__all__ = ["MoE", "experts", "is_moe_param", "layer", "sharded_moe", "utils"]
