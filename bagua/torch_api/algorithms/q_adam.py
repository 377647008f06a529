"""QAdam: Adam with compressed momentum after a warmup."""

from __future__ import annotations

from bagua_algorithms.q_adam import QAdamAlgorithm, QAdamAlgorithmImpl, QAdamOptimizer

__all__ = ["QAdamAlgorithm", "QAdamAlgorithmImpl", "QAdamOptimizer"]
