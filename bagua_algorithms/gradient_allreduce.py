"""``gradient_allreduce``: average (or sum) gradients over all ranks, bucket by bucket, while backward runs.

Communicated: each bucket of gradients in its own dtype, with an allreduce (AVG when ``average``).
Hierarchical: reduce inside each node to its leader, allreduce among leaders, broadcast inside the
node. The result equals torch DDP's (beyond 2 ranks, to the rounding of a different order of additions),
and every rank ends bit-identical.

Example::

    >>> from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithm
    >>> model = model.with_bagua([optimizer], GradientAllReduceAlgorithm(hierarchical=False))
"""

from __future__ import annotations

from typing import Literal

import torch

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig, AlgorithmImpl
from bagua_core.lifecycle.capabilities import Capabilities, FaultTolerance
from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.plugins import hookimpl

__all__ = ["GradientAllReduceConfig", "GradientAllReduceAlgorithm", "GradientAllReduceAlgorithmImpl"]


class GradientAllReduceConfig(AlgorithmConfig):
    name: Literal["gradient_allreduce"] = "gradient_allreduce"
    hierarchical: bool = False
    """Reduce inside each node first, allreduce among node leaders, then broadcast inside the node."""
    average: bool = True
    """Average the gradients (True) or sum them (False)."""


class GradientAllReduceAlgorithmImpl(AlgorithmImpl):
    compression: str | None = None
    """Compression of the centralized op (bytegrad's impl sets "MinMaxUInt8")."""

    def __init__(self, process_group, hierarchical: bool = False, average: bool = True) -> None:
        super().__init__(process_group)
        self.hierarchical = hierarchical
        self.average = average

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        bucket.clear_ops()
        bucket.append_centralized_synchronous_op(
            hierarchical=self.hierarchical, average=self.average, compression=self.compression, group=self.process_group
        )


class GradientAllReduceAlgorithm(Algorithm):
    """Gradient allreduce (the algorithm of torch DDP and Horovod)."""

    name = "gradient_allreduce"
    Config = GradientAllReduceConfig
    capabilities = Capabilities(communicates="gradients", tunable_bucket_size=True, keeps_optimizer_semantics=True,
                                relative_bytes=1.0,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "step"), commit="before_optimizer_step",
                                    rederives=("averaging denominator", "hierarchy (a replica is a node)")))

    def __init__(self, hierarchical: bool = False, average: bool = True) -> None:
        super().__init__(hierarchical=hierarchical, average=average)

    def reify(self, process_group) -> GradientAllReduceAlgorithmImpl:
        return GradientAllReduceAlgorithmImpl(process_group, self.config.hierarchical, self.config.average)


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [GradientAllReduceAlgorithm]
