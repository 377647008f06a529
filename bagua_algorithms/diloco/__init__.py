"""``diloco``: DiLoCo and Streaming DiLoCo (see ``algorithm.py``).

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl), :mod:`.fragments`
(the parameters cut into fragments and their schedules), :mod:`.exchange` (a fragment's outer-gradient
exchange, compressed with error feedback), :mod:`.state` (checkpoints and healing).

Example::

    >>> model = model.with_bagua([optimizer], {"name": "diloco", "inner_steps": 100})
"""

from __future__ import annotations

from bagua_algorithms.diloco.algorithm import DiLoCoAlgorithm, DiLoCoAlgorithmImpl
from bagua_algorithms.diloco.config import DiLoCoConfig
from bagua_core.api import Algorithm, hookimpl

__all__ = ["DiLoCoAlgorithm", "DiLoCoAlgorithmImpl", "DiLoCoConfig"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [DiLoCoAlgorithm]
