"""Asynchronous model averaging, with the original's documented signatures."""

from __future__ import annotations

from bagua.torch_api.algorithms.base import LegacyBuckets, OriginalAlgorithm, OriginalImpl
from bagua_algorithms.async_model_average import AsyncModelAverageAlgorithm as _Algorithm
from bagua_algorithms.async_model_average import AsyncModelAverageAlgorithmImpl as _Impl
from bagua_algorithms.async_model_average import AsyncModelAverageConfig

__all__ = ["AsyncModelAverageAlgorithm", "AsyncModelAverageAlgorithmImpl"]


class AsyncModelAverageAlgorithmImpl(LegacyBuckets, OriginalImpl, _Impl):
    def __init__(self, process_group, peer_selection_mode: str = "all", sync_interval_ms: int = 500,
                 warmup_steps: int = 0, weighting: str = "equal") -> None:
        super().__init__(process_group, AsyncModelAverageConfig(
            peer_selection_mode=peer_selection_mode, sync_interval_ms=sync_interval_ms, warmup_steps=warmup_steps,
            weighting=weighting))


class AsyncModelAverageAlgorithm(OriginalAlgorithm, _Algorithm):
    def __init__(self, peer_selection_mode: str = "all", sync_interval_ms: int = 500, warmup_steps: int = 0) -> None:
        super().__init__(peer_selection_mode=peer_selection_mode, sync_interval_ms=sync_interval_ms,
                         warmup_steps=warmup_steps)

    def reify(self, process_group) -> AsyncModelAverageAlgorithmImpl:
        return AsyncModelAverageAlgorithmImpl(process_group, **self.config.model_dump(exclude={"name"}))
