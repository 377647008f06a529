"""An event timeline of training steps: when forward and backward end, when each bucket's operations
and each round of the pipelined exchange start and end, on which thread (``profile_step --timeline``).

Example (rank 0 prints the last timed step)::

    >>> record = install()                 # in each rank, before wrapping the model
    >>> record("step")                     # the training loop marks its phases
    >>> print(format_step(last_step()))
"""

from __future__ import annotations

import functools
import threading
import time

__all__ = ["EVENTS", "format_step", "install", "last_step", "record"]

EVENTS: list[tuple[float, str, str]] = []
"""``(perf_counter seconds, thread, what)`` in the order they happened."""


def record(what: str) -> None:
    """Append an event of the calling thread."""
    thread = "main" if threading.current_thread() is threading.main_thread() else "comm"
    EVENTS.append((time.perf_counter(), thread, what))


def _around(owner: object, name: str, label) -> None:  # noqa: ANN001
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        what = label(*args)
        if what is None:  # nothing worth an event
            return original(*args, **kwargs)
        record(f"{what} start")
        try:
            return original(*args, **kwargs)
        finally:
            record(f"{what} end")

    setattr(owner, name, wrapper)


def install() -> None:
    """Record the start and end of every bucket's operations, of every pipelined round and of a
    hierarchical form's reduce and broadcast inside the host."""
    from bagua_core.lifecycle.bucket import BaguaBucket
    from bagua_algorithms.bytegrad.compressed_pipeline import PipelinedExchange
    from bagua_algorithms.low_precision_decentralized import op as low_precision_decentralized

    _around(BaguaBucket, "execute_ops", lambda bucket, *rest: f"{bucket.name} ops")
    _around(BaguaBucket, "complete_deferred",
            lambda bucket, *rest: f"{bucket.name} in-flight completion" if bucket._deferred else None)
    _around(PipelinedExchange, "run", lambda self: f"rounds of {len(self.segs)} segments")
    # bytegrad's exchange in two halves: round 1 sent when the bucket starts, the rest when it is completed
    _around(PipelinedExchange, "start", lambda self: f"sends of {len(self.segs)} segments")
    _around(PipelinedExchange, "finish", lambda self: f"receives of {len(self.segs)} segments")
    # the low-precision ring's phases: the difference, the round, its neighbours' messages completed
    op = low_precision_decentralized.LowPrecisionDecentralizedOp
    _around(op, "prepare", lambda *rest: "ring difference")
    _around(op, "_ring_step", lambda *rest: "ring round")
    _around(op, "complete", lambda self: "ring completion" if self._in_flight is not None else None)
    from bagua_core.module import hooks

    _around(hooks, "agree_on_nonfinite_gradients", lambda *rest: "overflow agreement")
    # a hierarchical form's steps inside the host: the reduce to the leader, the leader's broadcast
    # (decentralized's weights go piece by piece through its own op: a mark per piece)
    from bagua_algorithms.decentralized import op as decentralized_op
    from bagua_core.lifecycle.bucket_ops import hierarchy

    for module in (hierarchy, decentralized_op):
        _around(module, "reduce_inplace", lambda *rest: "reduce inside the host")
        _around(module, "broadcast", lambda *rest: "broadcast inside the host")


def last_step() -> list[tuple[float, str, str]]:
    """The events from the last ``"step"`` mark on."""
    starts = [i for i, (_, _, what) in enumerate(EVENTS) if what == "step"]
    return EVENTS[starts[-1]:] if starts else list(EVENTS)


def format_step(events: list[tuple[float, str, str]]) -> str:
    """One line per event: milliseconds since the first, thread, what."""
    if not events:
        return "(no events)"
    origin = events[0][0]
    return "\n".join(f"{1000 * (t - origin):8.1f} ms  {thread:4}  {what}" for t, thread, what in events)
