"""``decentralized``: each rank averages its weights with peers instead of allreducing gradients.

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl), :mod:`.op` (the
bucket op: the peer averaging, ``all`` or ``shift_one``), :mod:`.weights` (what the weight-communicating
algorithms share; ``low_precision_decentralized`` imports it).

Example::

    >>> from bagua_algorithms.decentralized import DecentralizedAlgorithm
    >>> model = model.with_bagua([optimizer], DecentralizedAlgorithm(peer_selection_mode="shift_one"))
"""

from __future__ import annotations

from bagua_algorithms.decentralized.algorithm import DecentralizedAlgorithm, DecentralizedAlgorithmImpl
from bagua_algorithms.decentralized.config import DecentralizedConfig
from bagua_algorithms.decentralized.op import DecentralizedSynchronousOp
from bagua_core.api import Algorithm, hookimpl

__all__ = ["DecentralizedAlgorithm", "DecentralizedAlgorithmImpl", "DecentralizedConfig", "DecentralizedSynchronousOp"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [DecentralizedAlgorithm]
