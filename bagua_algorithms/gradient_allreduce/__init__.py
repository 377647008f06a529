"""``gradient_allreduce``: average (or sum) gradients over all ranks, bucket by bucket, while backward runs.

Communicated: each bucket of gradients in its own dtype, with an allreduce (AVG when ``average``).
Hierarchical: reduce inside each node to its leader, allreduce among leaders, broadcast inside the
node. The result equals torch DDP's (beyond 2 ranks, to the rounding of a different order of additions),
and every rank ends bit-identical.

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl); the op is the
core's ``CentralizedSynchronousOp``.

Example::

    >>> from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithm
    >>> model = model.with_bagua([optimizer], GradientAllReduceAlgorithm(hierarchical=False))
"""

from __future__ import annotations

from bagua_algorithms.gradient_allreduce.algorithm import GradientAllReduceAlgorithm, GradientAllReduceAlgorithmImpl
from bagua_algorithms.gradient_allreduce.config import GradientAllReduceConfig
from bagua_core.api import Algorithm, hookimpl

__all__ = ["GradientAllReduceAlgorithm", "GradientAllReduceAlgorithmImpl", "GradientAllReduceConfig"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [GradientAllReduceAlgorithm]
