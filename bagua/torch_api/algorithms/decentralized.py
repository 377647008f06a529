"""Decentralized and low-precision decentralized SGD."""

from __future__ import annotations

from bagua_algorithms.decentralized import (
    DecentralizedAlgorithm,
    DecentralizedAlgorithmImpl,
    LowPrecisionDecentralizedAlgorithm,
    LowPrecisionDecentralizedAlgorithmImpl,
)

__all__ = [
    "DecentralizedAlgorithm", "DecentralizedAlgorithmImpl", "LowPrecisionDecentralizedAlgorithm",
    "LowPrecisionDecentralizedAlgorithmImpl",
]
