"""``diloco``: DiLoCo and Streaming DiLoCo (see ``algorithm.py``).

Example::

    >>> model = model.with_bagua([optimizer], {"name": "diloco", "inner_steps": 100})
"""

from __future__ import annotations

from bagua_algorithms.diloco.algorithm import DiLoCoAlgorithm, DiLoCoAlgorithmImpl
from bagua_algorithms.diloco.config import DiLoCoConfig
from bagua_core.lifecycle.algorithm import Algorithm
from bagua_core.plugins import hookimpl

__all__ = ["DiLoCoAlgorithm", "DiLoCoAlgorithmImpl", "DiLoCoConfig", "bagua_register_algorithms"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [DiLoCoAlgorithm]
