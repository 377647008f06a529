"""A rank that has done its work never hangs on its way out: it dumps its threads' stacks and exits.

Shutting down is bounded everywhere bagua waits (the watchdog's and the communication threads' joins), but
not below it: torch's process group destruction, the interpreter's finalization, a thread a library left
behind. A hang there, after the job printed its results, used to keep the launcher (and CI) waiting with
nothing to show (a two-rank benchmark, once in nine CI runs). So, for ``BAGUA_EXIT_TIMEOUT_S`` seconds
(default 60, 0: off, :func:`~bagua_core.runtime.env.get_exit_timeout_s`):

- :func:`watching` covers ``destroy_process_group``;
- :func:`watch_exit` (``init_process_group`` calls it) covers the end of the process, from the moment its
  main thread has finished (a daemon thread that joins it arms the watch; an ``atexit`` handler arms it again
  in case that thread had no chance to run).

Past the timeout, :func:`faulthandler.dump_traceback_later`'s own C thread (it needs neither the GIL nor the
interpreter) writes every thread's Python stack to stderr under ``Timeout (0:01:00)!`` and exits the process
with status 1, so the launcher reports this rank as failed (``bagua run`` says it did not exit in time).

Example::

    >>> with watching():              # destroy_process_group
    ...     dist.destroy_process_group()
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import sys
import threading
from collections.abc import Iterator

from bagua_core.runtime import env

__all__ = ["DUMP_HEADER", "watch_exit", "watching"]

DUMP_HEADER = "Timeout ("
"""How faulthandler's dump starts (``Timeout (0:01:00)!``): the launcher recognizes a rank that hung at exit."""

_lock = threading.Lock()
_exiting = False  # the process is on its way out: the watch, once armed, stays armed
_watcher: threading.Thread | None = None


def _arm() -> bool:
    timeout = env.get_exit_timeout_s()
    if timeout <= 0:
        return False
    stream = sys.__stderr__
    try:
        faulthandler.dump_traceback_later(timeout, exit=True, file=stream)
    except (AttributeError, OSError, ValueError, RuntimeError):  # no stderr with a file descriptor
        return False
    return True


def _arm_for_exit() -> None:
    global _exiting
    with _lock:
        _exiting = True
        _arm()


@contextlib.contextmanager
def watching() -> Iterator[None]:
    """Dump the stacks and exit (status 1) if the block does not finish within ``BAGUA_EXIT_TIMEOUT_S``."""
    armed = _arm()
    try:
        yield
    finally:
        with _lock:
            if _exiting:
                _arm()  # the exit watch starts again from here
            elif armed:
                faulthandler.cancel_dump_traceback_later()


def _wait_for_main_thread() -> None:
    threading.main_thread().join()  # returns once the main thread's Python code has finished
    _arm_for_exit()


def watch_exit() -> None:
    """From the end of the main thread on, the process must exit within ``BAGUA_EXIT_TIMEOUT_S`` (once per
    process; a no-op with the watch off)."""
    global _watcher
    if env.get_exit_timeout_s() <= 0 or _watcher is not None or threading.current_thread() is not threading.main_thread():
        return
    _watcher = threading.Thread(target=_wait_for_main_thread, name="bagua-exit-watch", daemon=True)
    _watcher.start()
    atexit.register(_arm_for_exit)
