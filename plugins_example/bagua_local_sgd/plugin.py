"""The module named by this package's ``bagua`` entry point: it implements bagua's registration hook."""

from __future__ import annotations

from bagua_core import Algorithm
from bagua_core.plugins import hookimpl

from bagua_local_sgd.algorithm import LocalSGDAlgorithm

__all__ = ["bagua_register_algorithms"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [LocalSGDAlgorithm]
