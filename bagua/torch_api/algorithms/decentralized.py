"""Decentralized and low-precision decentralized SGD, with the original's documented signatures
(``compression`` is this project's addition)."""

from __future__ import annotations

from bagua.torch_api.algorithms.base import LegacyBuckets, OriginalAlgorithm, OriginalImpl
from bagua_algorithms.decentralized import DecentralizedAlgorithm as _Decentralized
from bagua_algorithms.decentralized import DecentralizedAlgorithmImpl as _DecentralizedImpl
from bagua_algorithms.decentralized import DecentralizedConfig
from bagua_algorithms.low_precision_decentralized import LowPrecisionDecentralizedAlgorithm as _LowPrecision
from bagua_algorithms.low_precision_decentralized import LowPrecisionDecentralizedAlgorithmImpl as _LowPrecisionImpl
from bagua_algorithms.low_precision_decentralized import LowPrecisionDecentralizedConfig

__all__ = [
    "DecentralizedAlgorithm", "DecentralizedAlgorithmImpl", "LowPrecisionDecentralizedAlgorithm",
    "LowPrecisionDecentralizedAlgorithmImpl",
]


class DecentralizedAlgorithmImpl(LegacyBuckets, OriginalImpl, _DecentralizedImpl):
    def __init__(self, process_group, hierarchical: bool = True, peer_selection_mode: str = "all",
                 communication_interval: int = 1) -> None:
        super().__init__(process_group, DecentralizedConfig(
            hierarchical=hierarchical, peer_selection_mode=peer_selection_mode,
            communication_interval=communication_interval))


class DecentralizedAlgorithm(OriginalAlgorithm, _Decentralized):
    def __init__(self, hierarchical: bool = True, peer_selection_mode: str = "all",
                 communication_interval: int = 1) -> None:
        super().__init__(hierarchical=hierarchical, peer_selection_mode=peer_selection_mode,
                         communication_interval=communication_interval)

    def reify(self, process_group) -> DecentralizedAlgorithmImpl:
        return DecentralizedAlgorithmImpl(process_group, **self.config.model_dump(exclude={"name"}))


class LowPrecisionDecentralizedAlgorithmImpl(OriginalImpl, _LowPrecisionImpl):
    def __init__(self, process_group, hierarchical: bool = True, communication_interval: int = 1,
                 compression: str = "MinMaxUInt8") -> None:
        super().__init__(process_group, LowPrecisionDecentralizedConfig(
            hierarchical=hierarchical, communication_interval=communication_interval, compression=compression))


class LowPrecisionDecentralizedAlgorithm(OriginalAlgorithm, _LowPrecision):
    def __init__(self, hierarchical: bool = True, communication_interval: int = 1,
                 compression: str = "MinMaxUInt8") -> None:
        super().__init__(hierarchical=hierarchical, communication_interval=communication_interval,
                         compression=compression)

    def reify(self, process_group) -> LowPrecisionDecentralizedAlgorithmImpl:
        return LowPrecisionDecentralizedAlgorithmImpl(process_group, **self.config.model_dump(exclude={"name"}))
