"""Algorithms: the base classes, the registry, and one module per built-in algorithm."""

from __future__ import annotations

from bagua.torch_api.algorithms.base import Algorithm, AlgorithmImpl, GlobalAlgorithmRegistry
from bagua.torch_api.algorithms import (  # noqa: E402
    async_model_average,
    base,
    bytegrad,
    decentralized,
    gradient_allreduce,
    q_adam,
)

__all__ = [
    "Algorithm", "AlgorithmImpl", "GlobalAlgorithmRegistry", "async_model_average", "base", "bytegrad",
    "decentralized", "gradient_allreduce", "q_adam",
]
