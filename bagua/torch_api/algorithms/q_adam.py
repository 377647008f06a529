"""QAdam: Adam with compressed momentum after a warmup, with the original's documented signatures
(``compression`` is this project's addition)."""

from __future__ import annotations

from bagua.torch_api.algorithms.base import LegacyBuckets, OriginalAlgorithm, OriginalImpl
from bagua_algorithms.q_adam import QAdamAlgorithm as _Algorithm
from bagua_algorithms.q_adam import QAdamAlgorithmImpl as _Impl
from bagua_algorithms.q_adam import QAdamConfig, QAdamOptimizer

__all__ = ["QAdamAlgorithm", "QAdamAlgorithmImpl", "QAdamOptimizer"]


class QAdamAlgorithmImpl(LegacyBuckets, OriginalImpl, _Impl):
    def __init__(self, process_group, q_adam_optimizer: QAdamOptimizer, hierarchical: bool = True,
                 compression: str = "MinMaxUInt8") -> None:
        super().__init__(process_group, QAdamConfig(hierarchical=hierarchical, compression=compression),
                         q_adam_optimizer)


class QAdamAlgorithm(OriginalAlgorithm, _Algorithm):
    def __init__(self, q_adam_optimizer: QAdamOptimizer, hierarchical: bool = True,
                 compression: str = "MinMaxUInt8") -> None:
        super().__init__(q_adam_optimizer, hierarchical=hierarchical, compression=compression)

    def reify(self, process_group) -> QAdamAlgorithmImpl:
        return QAdamAlgorithmImpl(process_group, self.optimizer, **self.config.model_dump(exclude={"name"}))
