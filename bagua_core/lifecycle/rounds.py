"""``RoundCount``: what an algorithm that communicates in rounds (not once per step) tells the core about them.

An impl whose exchanges do not follow the training steps (a round every H inner steps, a background thread's
rounds) returns one from ``AlgorithmImpl.rounds_completed()``; the core's metrics
(``bagua_features.metrics``) turn the counts into per-round records: the round's compression is the round's
full-precision bytes over the bytes this process handed to collectives since the round before. An impl that
returns None (the default) makes every step that hands bytes to a collective a round, whose full-precision
bytes are its buckets'.

Example::

    >>> def rounds_completed(self):                  # in an AlgorithmImpl
    ...     return RoundCount(self.merged, self.merged_bytes)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RoundCount"]


@dataclass(frozen=True, slots=True)
class RoundCount:
    """The rounds this impl completed on this rank since it was reified, and what they exchanged."""

    rounds: int
    """Rounds completed (exchanged and applied) so far."""
    dense_bytes: int
    """The bytes a full-precision exchange of those rounds' tensors would have handed to collectives (their
    elements times 4 for fp32): the numerator of the compression ratio."""
