"""The options of ``gradient_allreduce``."""

from __future__ import annotations

from typing import Literal

from bagua_core.api import AlgorithmConfig

__all__ = ["GradientAllReduceConfig"]


class GradientAllReduceConfig(AlgorithmConfig):
    name: Literal["gradient_allreduce"] = "gradient_allreduce"
    hierarchical: bool = False
    """Reduce inside each node first, allreduce among node leaders, then broadcast inside the node."""
    average: bool = True
    """Average the gradients (True) or sum them (False)."""
