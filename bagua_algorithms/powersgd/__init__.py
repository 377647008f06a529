"""``powersgd``: low-rank gradient compression with error feedback (see ``algorithm.py``).

Example::

    >>> model = model.with_bagua([optimizer], "powersgd")
"""

from __future__ import annotations

from bagua_algorithms.powersgd.algorithm import PowerSGDAlgorithm, PowerSGDAlgorithmImpl, PowerSGDConfig
from bagua_core.lifecycle.algorithm import Algorithm
from bagua_core.plugins import hookimpl

__all__ = ["PowerSGDAlgorithm", "PowerSGDAlgorithmImpl", "PowerSGDConfig", "bagua_register_algorithms"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [PowerSGDAlgorithm]
