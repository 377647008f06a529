"""bagua-local-sgd: a third-party bagua algorithm package.

After ``pip install bagua-local-sgd`` the algorithm is found by name, with no other change::

    >>> model = model.with_bagua([optimizer], {"name": "local_sgd", "sync_every": 4})

It uses bagua's public API only: ``Algorithm``, ``AlgorithmConfig``, ``AlgorithmImpl``, the
``hookimpl`` marker and the collectives.
"""

from __future__ import annotations

from bagua_local_sgd.algorithm import LocalSGDAlgorithm, LocalSGDAlgorithmImpl, LocalSGDConfig

__all__ = ["LocalSGDAlgorithm", "LocalSGDAlgorithmImpl", "LocalSGDConfig"]
__version__ = "0.1.0"
