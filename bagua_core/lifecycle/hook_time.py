"""The seconds the training thread spends in bagua's hooks (the forward pre-hook, the per-parameter backward hooks
that launch buckets, the end of backward that waits for them, the optimizer step hooks): the communication a step
did not overlap with computation, plus what an algorithm runs on that thread. Counted only once a feature asks
(``WrappedModule.count_hook_seconds()``, the metrics do); until then each hook enters one shared no-op.

Example::

    >>> wrapped = WrappedModule(model); wrapped.count_hook_seconds()
    >>> loss.backward(); optimizer.step()
    >>> wrapped.take_hook_seconds()      # since the last take, and counting starts again from 0
    0.0042
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["timed"]


class _Timed:
    """Adds the seconds of the block it guards to ``state.hook_seconds``."""

    __slots__ = ("state", "started")

    def __init__(self, state: Any) -> None:
        self.state = state
        self.started = 0.0

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if self.state.hook_seconds is not None:
            self.state.hook_seconds += time.perf_counter() - self.started
        return False


class _Untimed:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        return False


_UNTIMED = _Untimed()


def timed(state: Any) -> _Timed | _Untimed:
    """``with timed(state):`` adds the block's seconds to the module state's ``hook_seconds`` when a feature counts
    them (not None); else one shared no-op. Plain objects, not generators: the hooks enter one per call."""
    return _UNTIMED if state.hook_seconds is None else _Timed(state)
