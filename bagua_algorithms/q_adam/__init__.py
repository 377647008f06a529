"""``qadam``: Adam whose momentum, after a full-precision warmup, is averaged with MinMaxUInt8
compression (the second moment is frozen).

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl; the momentum goes
through bytegrad's op, imported from ``bagua_algorithms.bytegrad``), :mod:`.optimizer`
(``QAdamOptimizer``), :mod:`.loss_scaling` (``GradScaler`` overflows skipped on every rank).

Example::

    >>> from bagua_algorithms.q_adam import QAdamAlgorithm, QAdamOptimizer
    >>> optimizer = QAdamOptimizer(model.parameters(), lr=1e-3, warmup_steps=100)
    >>> model = model.with_bagua([optimizer], QAdamAlgorithm(optimizer))   # or "qadam"
"""

from __future__ import annotations

from bagua_algorithms.q_adam.algorithm import QAdamAlgorithm, QAdamAlgorithmImpl
from bagua_algorithms.q_adam.config import QAdamConfig
from bagua_algorithms.q_adam.optimizer import QAdamOptimizer
from bagua_core.api import Algorithm, hookimpl

__all__ = ["QAdamAlgorithm", "QAdamAlgorithmImpl", "QAdamConfig", "QAdamOptimizer"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [QAdamAlgorithm]
