"""``GradientAllReduceAlgorithm`` and its impl: the core's centralized op on every bucket of gradients."""

from __future__ import annotations

import torch

from bagua_algorithms.gradient_allreduce.config import GradientAllReduceConfig
from bagua_core.api import (
    Algorithm,
    AlgorithmImpl,
    BaguaBucket,
    Capabilities,
    CentralizedSynchronousOp,
    FaultTolerance,
)

__all__ = ["GradientAllReduceAlgorithm", "GradientAllReduceAlgorithmImpl"]


class GradientAllReduceAlgorithmImpl(AlgorithmImpl):
    """Appends :class:`~bagua_core.lifecycle.bucket_ops.centralized.CentralizedSynchronousOp` to every bucket."""

    config: GradientAllReduceConfig

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        bucket.clear_ops()
        bucket.append_op(CentralizedSynchronousOp(self.process_group, self.hierarchical, self.config.average))


class GradientAllReduceAlgorithm(Algorithm):
    """Gradient allreduce (the algorithm of torch DDP and Horovod)."""

    name = "gradient_allreduce"
    Config = GradientAllReduceConfig
    Impl = GradientAllReduceAlgorithmImpl
    capabilities = Capabilities(communicates="gradients", tunable_bucket_size=True, keeps_optimizer_semantics=True,
                                relative_bytes=1.0,
                                supports_sharding=True,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "step"), commit="before_optimizer_step",
                                    rederives=("averaging denominator", "hierarchy (a replica is a node)")))
