"""``sparseloco``: SparseLoCo, DiLoCo with an error-feedback accumulator and a sparse quantised exchange.

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl, on diloco's round),
:mod:`.chunks` (the chunks of a fragment and the per-chunk top-k), :mod:`.quantiser` (values in 2, 4 or 8
bits), :mod:`.codec` (the message: indices and packed values, encoded and decoded). The exchange and the
checkpoint state are diloco's (``bagua_algorithms.diloco.exchange``, ``bagua_algorithms.diloco.state``).

Example::

    >>> model = model.with_bagua([optimizer], {"name": "sparseloco", "inner_steps": 30})
"""

from __future__ import annotations

from bagua_algorithms.sparseloco.algorithm import SparseLoCoAlgorithm, SparseLoCoAlgorithmImpl
from bagua_algorithms.sparseloco.codec import ChunkTopK
from bagua_algorithms.sparseloco.config import SparseLoCoConfig
from bagua_core.api import Algorithm, hookimpl

__all__ = ["ChunkTopK", "SparseLoCoAlgorithm", "SparseLoCoAlgorithmImpl", "SparseLoCoConfig"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [SparseLoCoAlgorithm]
