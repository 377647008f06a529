"""Gradient allreduce."""

from __future__ import annotations

from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithm, GradientAllReduceAlgorithmImpl

__all__ = ["GradientAllReduceAlgorithm", "GradientAllReduceAlgorithmImpl"]
