"""ByteGrad, with the original's documented signatures (``compression`` is this project's addition)."""

from __future__ import annotations

from bagua.torch_api.algorithms.base import LegacyBuckets, OriginalAlgorithm, OriginalImpl
from bagua_algorithms.bytegrad import ByteGradAlgorithm as _Algorithm
from bagua_algorithms.bytegrad import ByteGradAlgorithmImpl as _Impl
from bagua_algorithms.bytegrad import ByteGradConfig

__all__ = ["ByteGradAlgorithm", "ByteGradAlgorithmImpl"]


class ByteGradAlgorithmImpl(LegacyBuckets, OriginalImpl, _Impl):
    def __init__(self, process_group, hierarchical: bool = True, average: bool = True,
                 compression: str = "MinMaxUInt8") -> None:
        super().__init__(process_group, ByteGradConfig(hierarchical=hierarchical, average=average,
                                                       compression=compression))


class ByteGradAlgorithm(OriginalAlgorithm, _Algorithm):
    def __init__(self, hierarchical: bool = True, average: bool = True, compression: str = "MinMaxUInt8") -> None:
        super().__init__(hierarchical=hierarchical, average=average, compression=compression)

    def reify(self, process_group) -> ByteGradAlgorithmImpl:
        return ByteGradAlgorithmImpl(process_group, **self.config.model_dump(exclude={"name"}))
