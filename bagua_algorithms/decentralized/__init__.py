"""``decentralized`` and ``low_precision_decentralized``: each rank averages its weights with peers
instead of allreducing gradients.

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
from bagua_algorithms.decentralized.low_precision import (
    LowPrecisionDecentralizedAlgorithm,
    LowPrecisionDecentralizedAlgorithmImpl,
    LowPrecisionDecentralizedConfig,
)
from bagua_core.algorithm import Algorithm
from bagua_core.plugins import hookimpl

__all__ = [
    "DecentralizedAlgorithm",
    "DecentralizedAlgorithmImpl",
    "DecentralizedConfig",
    "LowPrecisionDecentralizedAlgorithm",
    "LowPrecisionDecentralizedAlgorithmImpl",
    "LowPrecisionDecentralizedConfig",
]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [DecentralizedAlgorithm, LowPrecisionDecentralizedAlgorithm]
