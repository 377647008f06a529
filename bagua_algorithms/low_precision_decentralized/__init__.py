"""``low_precision_decentralized``: after each optimizer step, exchange compressed weight differences
with the two ring neighbours.

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm, Impl and the buckets that
hold the replicas), :mod:`.op` (the ring exchange, pipelined), :mod:`.kernels` (its
fused steps). It builds on ``decentralized`` through what that package exports at its top level: the
weight-communicating impl (``bagua_algorithms.decentralized.WeightCommunicatingImpl``, with
``is_communication_step`` and ``check_positive_int``), and on ``bytegrad``'s: the pipelined-exchange engine
(``segments``, ``schedule``, ``post_receives``, ``send_segment``, ``wait_all``).

Example::

    >>> from bagua_algorithms.low_precision_decentralized import LowPrecisionDecentralizedAlgorithm
    >>> model = model.with_bagua([optimizer], LowPrecisionDecentralizedAlgorithm(hierarchical=False))
"""

from __future__ import annotations

from bagua_algorithms.low_precision_decentralized.algorithm import (
    LowPrecisionDecentralizedAlgorithm,
    LowPrecisionDecentralizedAlgorithmImpl,
    ReplicaBucket,
)
from bagua_algorithms.low_precision_decentralized.config import LowPrecisionDecentralizedConfig
from bagua_algorithms.low_precision_decentralized.op import LowPrecisionDecentralizedOp
from bagua_core.api import Algorithm, hookimpl

__all__ = ["LowPrecisionDecentralizedAlgorithm", "LowPrecisionDecentralizedAlgorithmImpl",
           "LowPrecisionDecentralizedConfig", "LowPrecisionDecentralizedOp", "ReplicaBucket"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [LowPrecisionDecentralizedAlgorithm]
