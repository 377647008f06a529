"""``ByteGradAlgorithm`` and its impl: every bucket of gradients through the compressed exchange."""

from __future__ import annotations

import torch

from bagua_algorithms.bytegrad.compressed import CompressedAllReduceOp
from bagua_algorithms.bytegrad.config import ByteGradConfig
from bagua_core.api import Algorithm, AlgorithmImpl, BaguaBucket, Capabilities, FaultTolerance

__all__ = ["ByteGradAlgorithm", "ByteGradAlgorithmImpl"]


class ByteGradAlgorithmImpl(AlgorithmImpl):
    """Appends :class:`~bagua_algorithms.bytegrad.compressed.CompressedAllReduceOp` to every bucket."""

    config: ByteGradConfig

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        c = self.config
        bucket.clear_ops()
        bucket.append_op(CompressedAllReduceOp(self.process_group, self.hierarchical, c.average, c.compression))


class ByteGradAlgorithm(Algorithm):
    """Gradient allreduce compressed to 8 bits per value (MinMaxUInt8)."""

    name = "bytegrad"
    Config = ByteGradConfig
    Impl = ByteGradAlgorithmImpl
    capabilities = Capabilities(communicates="gradients", tunable_bucket_size=True, keeps_optimizer_semantics=True,
                                relative_bytes=0.25,
                                supports_sharding=True,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "step"), commit="before_optimizer_step",
                                    rederives=("chunking by world size", "averaging denominator",
                                               "hierarchy (a replica is a node)")))
    """MinMaxUInt8 (the default codec): a byte per fp32 value plus a min/max per chunk, about a quarter."""
