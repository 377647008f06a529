"""``diloco``: DiLoCo and Streaming DiLoCo (see ``algorithm.py``).

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl), :mod:`.fragments`
(the parameters cut into fragments and their schedules), :mod:`.exchange` (a fragment's outer-gradient
exchange, compressed with error feedback), :mod:`.state` (checkpoints and healing), :mod:`.timed` (rounds
bounded in time). Another package imports only the names below (``__all__``); the modules are this package's
to change.

Extension points, for an algorithm built on diloco's round (``sparseloco`` is one):

- ``DiLoCoAlgorithmImpl``: the round (inner steps, then each fragment's exchange and outer step; checkpoints,
  healing, sharded models). A subclass overrides its extension methods ``new_exchange(fragment, start)`` (the
  exchange of one fragment's outer gradient) and ``new_outer(starts)`` (the outer optimizer), may override
  ``merge_in_flight(fragment)`` (wait for an exchange in flight, take its outer step and write the weights in
  one go, cheaper than the dense average, the outer optimizer's step and the copy; default: not taken), and may
  add methods of its own; the rest (its ``_``-prefixed methods included) is the round's.
- ``RoundOptions``: what the round reads of its config; a subclass's config provides these names (fixed ones as
  properties).
- ``FragmentExchange``: the exchange ``new_exchange`` returns: the averaging of a fragment's outer gradient,
  through a codec with error feedback (``error_decay``) or in fp32, left in flight.
- ``FragmentCodec``: what ``FragmentExchange`` calls of a codec that is no registered ``Codec`` (``encode``,
  ``encoded_size``, ``decode``, ``decode_average``; sparseloco's ``ChunkTopK``), and the calls it uses where a codec
  has them (``encode_residual``, ``encode_difference``, ``average_entries``: the round's fused forms).
- ``check_round_seconds(config, streaming=False)``: the check a config with ``round_seconds`` runs (rounds bounded
  in time read no ``inner_steps``); ``check_overlap(overlap_steps, inner_steps)`` and
  ``check_eager(overlap_steps, streaming=False)``: the checks of ``overlap_steps`` and ``eager``.

Example::

    >>> model = model.with_bagua([optimizer], {"name": "diloco", "inner_steps": 100})
"""

from __future__ import annotations

from bagua_algorithms.diloco.algorithm import DiLoCoAlgorithm, DiLoCoAlgorithmImpl, RoundOptions
from bagua_algorithms.diloco.config import DiLoCoConfig, check_eager, check_overlap, check_round_seconds
from bagua_algorithms.diloco.exchange import FragmentCodec, FragmentExchange
from bagua_core.api import Algorithm, hookimpl

__all__ = ["DiLoCoAlgorithm", "DiLoCoAlgorithmImpl", "DiLoCoConfig", "FragmentCodec", "FragmentExchange",
           "RoundOptions", "check_eager", "check_overlap", "check_round_seconds"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [DiLoCoAlgorithm]
