"""The failure watchdog: a thread per process that learns of a peer's failure from the store.

Every ``POLL_S`` seconds it checks (non-blocking, on a store connection of its own) whether a rank
recorded a failure. When one did, it marks this process aborted (nothing further is issued), aborts
its NCCL process groups, acknowledges (``ack_<rank>``), and, if the main thread has not raised within
``GRACE_S`` seconds (it is computing, sleeping, hung in Python, or blocked in a gloo collective, which no
abort reaches), interrupts the main thread with a :class:`~bagua_core.runtime.exceptions.PeerFailureError` (a
real-time signal where the platform has one, else ``KeyboardInterrupt``) and prints the rank's line about the
failure unless the main thread's hook did (:mod:`.lines`: the failing rank waits for it before it exits, and a main
thread blocked in gloo returns only once it has). ``BAGUA_FAILURE_WATCHDOG=0`` turns it off.

The rank that hosts the store (rank 0 outside torchelastic) waits at exit, after a failure of the job,
up to ``LINGER_S`` seconds for every rank to acknowledge, so the record outlives it long enough.

Example::

    >>> watchdog = Watchdog(); watchdog.start()      # init_process_group does this
    >>> watchdog.stop()                              # destroy_process_group
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time

from bagua_core.runtime import env
from bagua_core.runtime.exceptions import PeerFailureError
from bagua_core.runtime.failure.lines import kind_of, say_stopped
from bagua_core.runtime.failure.record import FailureRecord, failure_error, learn, state
from bagua_core.runtime.failure.translate import lost_peers

__all__ = ["GRACE_S", "JOIN_S", "LINGER_S", "POLL_S", "Watchdog", "enabled", "install_interrupt_handler", "linger"]

POLL_S = 0.5
GRACE_S = 2.0
LINGER_S = 3.0
JOIN_S = 6.0
"""How long stopping waits for a store call in flight (the failure store's timeout is 5 s)."""
_SIGNAL = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else None
_handler_installed = False


def enabled() -> bool:
    return os.environ.get("BAGUA_FAILURE_WATCHDOG", "1").strip().lower() not in ("0", "false", "no", "off")


def _on_interrupt(signum: int, frame: object) -> None:
    record = state.failure
    if record is None or record.rank == state.rank or state.main_thread_told:
        return
    state.main_thread_told = True
    raise failure_error(record, PeerFailureError, "interrupted: this rank was not in a collective")


def install_interrupt_handler() -> None:
    """Install the handler of the watchdog's signal (only possible from the main thread)."""
    global _handler_installed
    if _SIGNAL is None or _handler_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        signal.signal(_SIGNAL, _on_interrupt)
        _handler_installed = True
    except (ValueError, OSError):
        pass


def _interrupt_main_thread(record: FailureRecord) -> None:
    if _handler_installed:
        signal.pthread_kill(threading.main_thread().ident, _SIGNAL)  # wakes a sleep, unlike interrupt_main
        return
    print(f"bagua: interrupting the main thread: {record.describe()}", file=sys.stderr, flush=True)
    _thread.interrupt_main()


class Watchdog(threading.Thread):
    """Polls the store for the job's first failure (see the module doc)."""

    def __init__(self) -> None:
        super().__init__(name="bagua-failure-watchdog", daemon=True)
        self._stopping = threading.Event()
        self._store = None
        if state.store is not None:
            try:
                self._store = state.store.clone()  # a connection of its own
            except Exception:
                self._store = None

    def stop(self) -> None:
        """Stop polling and wait (up to ``JOIN_S``) until the thread has left the store. A daemon thread
        still inside a store call when the interpreter finalizes is killed as it takes the GIL back, and
        that kill, unwinding through C++, aborts the process ("terminate called without an active
        exception") after all its work is done."""
        self._stopping.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=JOIN_S)

    def run(self) -> None:
        if self._store is None:
            return
        while not self._stopping.wait(POLL_S):
            try:
                if not self._store.check(["first"]):
                    continue
                record = FailureRecord.from_bytes(self._store.get("first"))
            except Exception:  # the store's host is gone: the collectives report what happened
                return
            if record.rank == state.rank:
                return
            learn(record)
            try:
                self._store.set(f"ack_{state.rank}", b"1")
            except Exception:
                pass
            if self._stopping.wait(GRACE_S) or state.main_thread_told or state.own:
                return
            _interrupt_main_thread(record)
            if not env.verbose():  # the main thread may be blocked in a gloo collective until the failing
                # rank exits, and that rank waits for this line before it exits: say it from here (once: if the
                # interrupted main thread's hook says it first, this says nothing)
                say_stopped(record.rank, kind_of(record.cause), cancel=self._stopping)
            return


def linger() -> None:
    """At exit, after a failure of the job, the rank that hosts the store (rank 0 outside torchelastic)
    lets every rank learn it (``ack_<rank>``) before the store goes away with this process."""
    store = state.store
    if store is None or state.failure is None or state.rank != 0 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return
    deadline = time.monotonic() + LINGER_S
    gone = set(lost_peers())
    keys = [f"ack_{rank}" for rank in range(state.world_size) if rank != state.rank and rank not in gone]
    while keys and time.monotonic() < deadline:
        try:
            keys = [key for key in keys if not store.check([key])]
        except Exception:
            return
        time.sleep(0.05)
