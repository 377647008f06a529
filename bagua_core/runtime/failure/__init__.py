"""When a rank fails while training, every rank stops within seconds and says which rank failed and why.

The pieces (each its own module):

- :mod:`~bagua_core.runtime.failure.record`: the job's first failure, kept in torch's store (the first writer
  wins), and this process's view of it; once a process failed or learned of a failure, bagua issues
  no further collective there (:func:`raise_if_aborted`), so a failing rank never goes on issuing a
  shifted sequence of collectives;
- :mod:`~bagua_core.runtime.failure.translate`: what a rank raises: its own error (reported), or a
  ``PeerFailureError`` naming the rank that failed first, a ``CommunicationTimeoutError`` after
  ``BAGUA_COMM_TIMEOUT_S``, a ``CommunicationError`` naming the ranks whose process is gone;
- :mod:`~bagua_core.runtime.failure.abort`: NCCL process groups are aborted so their collectives in flight
  return; on gloo the peers' collectives fail when the failing process exits (its connections close);
- :mod:`~bagua_core.runtime.failure.watchdog`: a thread that learns of a peer's failure from the store and
  interrupts a main thread that is not in a collective;
- :mod:`~bagua_core.runtime.failure.uncaught`: uncaught exceptions are reported before the process exits.

``init_process_group`` calls :func:`start`, ``destroy_process_group`` :func:`stop`.

Example::

    >>> with guard("my collective step"):       # raises PeerFailureError if another rank failed first
    ...     bagua.allreduce_inplace(t)
"""

from __future__ import annotations

from bagua_core.runtime.failure import uncaught, watchdog
from bagua_core.runtime.failure.record import FailureRecord, first_failure, raise_if_aborted, report
from bagua_core.runtime.failure.record import start as _start_record
from bagua_core.runtime.failure.record import state as _state
from bagua_core.runtime.failure.record import stop as _stop_record
from bagua_core.runtime.failure.translate import Guard, guard, translate

__all__ = ["FailureRecord", "Guard", "first_failure", "guard", "raise_if_aborted", "report", "start", "stop",
           "translate"]

_watchdog: watchdog.Watchdog | None = None


def start(rank: int, world_size: int, procs: list[tuple[str, int]]) -> None:
    """Start failure tracking for this process's job: the store record, the watchdog, the hooks."""
    global _watchdog
    stop()
    _start_record(rank, world_size, procs)
    uncaught.install()
    if watchdog.enabled() and world_size > 1:
        watchdog.install_interrupt_handler()
        _watchdog = watchdog.Watchdog()
        _watchdog.start()


def stop() -> None:
    """Stop tracking (``destroy_process_group``); after a failure of the job, the store host lingers."""
    global _watchdog
    if _state.started:
        watchdog.linger()
    if _watchdog is not None:
        _watchdog.stop()
        _watchdog = None
    uncaught.uninstall()
    _stop_record()
