"""ByteGrad: gradient allreduce compressed to 8 bits."""

from __future__ import annotations

from bagua_algorithms.bytegrad import ByteGradAlgorithm, ByteGradAlgorithmImpl

__all__ = ["ByteGradAlgorithm", "ByteGradAlgorithmImpl"]
