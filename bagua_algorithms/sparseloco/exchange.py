"""sparseloco's exchange: diloco's :class:`~bagua_algorithms.diloco.FragmentExchange` with the round's sender side
in one call of the codec.

diloco's exchange computes, with a codec and error feedback, ``residual = error_decay * residual + delta``, the
message of ``residual``, what that message decodes to (``decode`` into a fragment-sized buffer) and ``residual
-= decoded``: four passes over the fragment besides the encoding. :class:`SparseLoCoExchange` hands that to
:meth:`~bagua_algorithms.sparseloco.codec.ChunkTopK.encode_residual`, which the native kernels do in one pass
over each chunk (only the sent entries change in the feedback), bit for bit the same. Weighted rounds and
``keep_contribution`` (eager updates) keep diloco's path. Nothing else differs: the message is launched,
waited for and averaged as diloco's.

Example::

    >>> exchange = SparseLoCoExchange(numel, ChunkTopK(numels, 4096, 64, 2), True, group, n, error_decay=0.95)
    >>> exchange.start(delta)          # residual updated, its message in flight
    >>> average = exchange.wait()      # the mean of what every replica sent
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_algorithms.diloco import FragmentExchange
from bagua_algorithms.sparseloco.codec import ChunkTopK

__all__ = ["SparseLoCoExchange"]


class SparseLoCoExchange(FragmentExchange):
    """:class:`FragmentExchange` whose unweighted rounds encode through ``ChunkTopK.encode_residual`` (module doc)."""

    codec: ChunkTopK

    def start(self, delta: torch.Tensor, weights: Sequence[float] | None = None, own_weight: float = 1.0,
              keep_contribution: bool = False) -> None:
        """:meth:`FragmentExchange.start`: with every weight 1 (or none), no ``keep_contribution`` and a residual,
        the residual's update, the message and the feedback in one call of the codec; diloco's path otherwise."""
        unweighted = weights is None or all(w == 1.0 for w in weights)
        if not unweighted or keep_contribution or self.residual is None or self.in_flight:
            super().start(delta, weights, own_weight, keep_contribution)
            return
        encoded = self.codec.encode_residual(self.residual, delta, self.error_decay)
        self.weights, self.contribution = None, None
        self._launch(encoded)
