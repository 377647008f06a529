"""When a rank fails while training, every rank stops within seconds and says which rank failed and why.

The pieces: :mod:`.record` (the job's first failure, kept in torch's store, the first writer winning; once a
process failed or learned of one, bagua issues no further collective there), :mod:`.translate` (what a rank raises:
its own error, or a ``PeerFailureError`` naming the rank that failed first, a ``CommunicationTimeoutError``, a
``CommunicationError``), :mod:`.abort` (the groups aborted so collectives in flight return), :mod:`.watchdog` (a
thread that learns of a peer's failure, says the rank's line and interrupts its main thread), :mod:`.uncaught`
(uncaught exceptions reported before the process exits), :mod:`.lines` (a rank's one line about a failure that began
elsewhere, printed once, by the hook or the watchdog).

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
