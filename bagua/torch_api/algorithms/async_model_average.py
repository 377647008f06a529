"""Asynchronous model averaging."""

from __future__ import annotations

from bagua_algorithms.async_model_average import AsyncModelAverageAlgorithm, AsyncModelAverageAlgorithmImpl

__all__ = ["AsyncModelAverageAlgorithm", "AsyncModelAverageAlgorithmImpl"]
