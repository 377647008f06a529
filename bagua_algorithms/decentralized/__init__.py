"""``decentralized`` and ``low_precision_decentralized``: each rank averages its weights with peers
instead of allreducing gradients.

Their bucket operations live here too: :mod:`~bagua_algorithms.decentralized.full_precision_op` (the
peer averaging) and :mod:`~bagua_algorithms.decentralized.low_precision_op` (the compressed ring), registered
for ``BaguaBucket``'s documented ``append_decentralized_synchronous_op`` and
``append_low_precision_decentralized_synchronous_op`` (hook ``bagua_register_bucket_ops``).

Example::

    >>> from bagua_algorithms.decentralized import DecentralizedAlgorithm
    >>> model = model.with_bagua([optimizer], DecentralizedAlgorithm(peer_selection_mode="shift_one"))
    >>> model = model.with_bagua([optimizer], {"name": "low_precision_decentralized", "hierarchical": False})
"""

from __future__ import annotations

from bagua_algorithms.decentralized.full_precision import (
    DecentralizedAlgorithm,
    DecentralizedAlgorithmImpl,
    DecentralizedConfig,
)
from bagua_algorithms.decentralized.full_precision_op import DecentralizedSynchronousOp
from bagua_algorithms.decentralized.low_precision import (
    LowPrecisionDecentralizedAlgorithm,
    LowPrecisionDecentralizedAlgorithmImpl,
    LowPrecisionDecentralizedConfig,
)
from bagua_algorithms.decentralized.low_precision_op import LowPrecisionDecentralizedOp
from bagua_core.lifecycle.algorithm import Algorithm
from bagua_core.plugins import hookimpl

__all__ = [
    "DecentralizedAlgorithm",
    "DecentralizedAlgorithmImpl",
    "DecentralizedConfig",
    "DecentralizedSynchronousOp",
    "LowPrecisionDecentralizedAlgorithm",
    "LowPrecisionDecentralizedAlgorithmImpl",
    "LowPrecisionDecentralizedConfig",
    "LowPrecisionDecentralizedOp",
]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [DecentralizedAlgorithm, LowPrecisionDecentralizedAlgorithm]


@hookimpl
def bagua_register_bucket_ops() -> list[type]:
    return [DecentralizedSynchronousOp, LowPrecisionDecentralizedOp]
