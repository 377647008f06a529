"""Gradient allreduce, with the original's documented signatures."""

from __future__ import annotations

from bagua.torch_api.algorithms.base import LegacyBuckets, OriginalAlgorithm, OriginalImpl
from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithm as _Algorithm
from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithmImpl as _Impl
from bagua_algorithms.gradient_allreduce import GradientAllReduceConfig

__all__ = ["GradientAllReduceAlgorithm", "GradientAllReduceAlgorithmImpl"]


class GradientAllReduceAlgorithmImpl(LegacyBuckets, OriginalImpl, _Impl):
    def __init__(self, process_group, hierarchical: bool = False, average: bool = True) -> None:
        super().__init__(process_group, GradientAllReduceConfig(hierarchical=hierarchical, average=average))


class GradientAllReduceAlgorithm(OriginalAlgorithm, _Algorithm):
    def __init__(self, hierarchical: bool = False, average: bool = True) -> None:
        super().__init__(hierarchical=hierarchical, average=average)

    def reify(self, process_group) -> GradientAllReduceAlgorithmImpl:
        return GradientAllReduceAlgorithmImpl(process_group, **self.config.model_dump(exclude={"name"}))
