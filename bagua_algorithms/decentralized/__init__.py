"""``decentralized``: each rank averages its weights with peers instead of allreducing gradients.

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl), :mod:`.op` (the
bucket op: the peer averaging, ``all`` or ``shift_one``), :mod:`.weights` (what the weight-communicating
algorithms share). Another package imports only the names below (``__all__``); the modules are this package's
to change.

Extension points, for an algorithm that communicates weights rather than gradients (``low_precision_decentralized``
builds on them):

- ``WeightCommunicatingImpl``: the base impl of such an algorithm: its buckets hold the weights
  (``init_tensors``), and a gradient becoming ready triggers nothing (``init_backward_hook``). A subclass
  overrides ``init_operations`` and the hooks it communicates in, and may override ``init_tensors``.
- ``weight_tensors(bagua_module)``: the module's parameters as bagua tensors, in the order that decides the
  weight buckets' layout (what ``WeightCommunicatingImpl.init_tensors`` returns).
- ``is_communication_step(bagua_module, communication_interval)``: whether this step communicates.
- ``check_positive_int``: a pydantic "before" validator of a positive integer option (``communication_interval``).

Example::

    >>> from bagua_algorithms.decentralized import DecentralizedAlgorithm
    >>> model = model.with_bagua([optimizer], DecentralizedAlgorithm(peer_selection_mode="shift_one"))
"""

from __future__ import annotations

from bagua_algorithms.decentralized.algorithm import DecentralizedAlgorithm, DecentralizedAlgorithmImpl
from bagua_algorithms.decentralized.config import DecentralizedConfig
from bagua_algorithms.decentralized.op import DecentralizedSynchronousOp
from bagua_algorithms.decentralized.weights import (
    WeightCommunicatingImpl,
    check_positive_int,
    is_communication_step,
    weight_tensors,
)
from bagua_core.api import Algorithm, hookimpl

__all__ = ["DecentralizedAlgorithm", "DecentralizedAlgorithmImpl", "DecentralizedConfig", "DecentralizedSynchronousOp",
           "WeightCommunicatingImpl", "check_positive_int", "is_communication_step", "weight_tensors"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [DecentralizedAlgorithm]
