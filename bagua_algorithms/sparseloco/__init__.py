"""``sparseloco``: SparseLoCo, DiLoCo with an error-feedback accumulator and a sparse quantised exchange.

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl, on diloco's round),
:mod:`.chunks` (the chunks of a fragment and the per-chunk top-k), :mod:`.quantiser` (values in 2, 4 or 8
bits), :mod:`.codec` (the message: indices and packed values, encoded and decoded, and the round's sender side in
one call), :mod:`.kernels` (the same in C and CUDA, ``kernels/native/``, which the codec runs where they take the
tensors: the torch code is the specification and the fallback). It builds on diloco through what that package
exports at its top level: its impl subclasses ``bagua_algorithms.diloco.DiLoCoAlgorithmImpl`` and overrides the
round's extension methods ``new_exchange`` (diloco's ``FragmentExchange`` with sparseloco's codec and decay),
``new_outer`` (plain SGD) and ``merge_in_flight`` (that SGD step on the average's entries alone); its config
checks ``round_seconds`` with diloco's ``check_round_seconds``. The checkpoint state is diloco's round's.

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
