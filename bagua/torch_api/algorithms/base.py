"""``Algorithm`` and ``AlgorithmImpl``: what an algorithm author subclasses."""

from __future__ import annotations

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmImpl
from bagua_core.plugins.runtime_registry import GlobalAlgorithmRegistry

__all__ = ["Algorithm", "AlgorithmImpl", "GlobalAlgorithmRegistry"]
