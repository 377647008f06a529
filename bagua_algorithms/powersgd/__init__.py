"""``powersgd``: low-rank gradient compression with error feedback (see ``algorithm.py``).

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl), :mod:`.low_rank` (the
bucket op: P and Q, their allreduces, the error feedback).

Example::

    >>> model = model.with_bagua([optimizer], "powersgd")
"""

from __future__ import annotations

from bagua_algorithms.powersgd.algorithm import PowerSGDAlgorithm, PowerSGDAlgorithmImpl
from bagua_algorithms.powersgd.config import PowerSGDConfig
from bagua_core.api import Algorithm, hookimpl

__all__ = ["PowerSGDAlgorithm", "PowerSGDAlgorithmImpl", "PowerSGDConfig"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [PowerSGDAlgorithm]
