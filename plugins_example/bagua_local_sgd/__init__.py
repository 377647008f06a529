"""bagua-local-sgd: a third-party bagua algorithm package.

After ``pip install bagua-local-sgd`` the algorithm is found by name, with no other change::

    >>> model = model.with_bagua([optimizer], {"name": "local_sgd", "sync_every": 4})

It uses bagua's public API only: ``Algorithm``, ``AlgorithmConfig``, ``AlgorithmImpl``, the core's
``CentralizedSynchronousOp``, the ``hookimpl`` marker and the collectives. Its layout is the one every
built-in algorithm package has: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl), and
this module, named by the package's ``bagua`` entry point, registering the plugin.
"""

from __future__ import annotations

from bagua_core.api import Algorithm, hookimpl

from bagua_local_sgd.algorithm import LocalSGDAlgorithm, LocalSGDAlgorithmImpl
from bagua_local_sgd.config import LocalSGDConfig

__all__ = ["LocalSGDAlgorithm", "LocalSGDAlgorithmImpl", "LocalSGDConfig"]
__version__ = "0.1.0"


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [LocalSGDAlgorithm]
