"""A rank that has done its work never hangs on its way out: it dumps its threads' stacks and exits.

Shutting down is bounded everywhere bagua waits (the watchdog's and the communication threads' joins), but
not below it: torch's process group destruction, the interpreter's finalization. A hang there, after the job
printed its results, used to keep the launcher (and CI) waiting with nothing to show (a two-rank benchmark,
once in nine CI runs). So, for ``BAGUA_EXIT_TIMEOUT_S`` seconds (default 60, 0: off,
:func:`~bagua_core.runtime.env.get_exit_timeout_s`):

- :func:`watching` covers ``destroy_process_group``'s teardown (not the wrapped modules' shutdown before it,
  which may wait for slower peers' last rounds);
- :func:`arm` (at exit, after ``destroy_process_group``) covers what remains: the interpreter's finalization.

The script's own work is never under the watch: not its threads, not its ``atexit`` handlers registered after
``init_process_group`` (they run before bagua's). Past the timeout, :func:`faulthandler.dump_traceback_later`'s
own C thread (it needs neither the GIL nor the interpreter) writes every thread's Python stack to stderr under
``Timeout (0:01:00)!`` and exits the process with status 1, so the launcher reports this rank as failed
(``bagua run`` says it did not exit in time).

``bagua run``'s launcher (the ``bagua`` program, ``bagua_cli.program``) arms :func:`arm` once its job has
returned: its workers have exited and it has reported; a hang in its own exit leaves its stacks on its stderr.

Example::

    >>> with watching():              # destroy_process_group
    ...     dist.destroy_process_group()
"""

from __future__ import annotations

import contextlib
import faulthandler
import sys
from collections.abc import Iterator

from bagua_core.runtime import env

__all__ = ["DUMP_HEADER", "arm", "watching"]

DUMP_HEADER = "Timeout ("
"""How faulthandler's dump starts (``Timeout (0:01:00)!``): the launcher recognizes a rank that hung at exit."""


def arm() -> bool:
    """Dump the stacks and exit (status 1) unless the process ends within ``BAGUA_EXIT_TIMEOUT_S`` from now
    (False: the watch is off)."""
    timeout = env.get_exit_timeout_s()
    if timeout <= 0:
        return False
    try:
        faulthandler.dump_traceback_later(timeout, exit=True, file=sys.__stderr__)
    except (AttributeError, OSError, ValueError, RuntimeError):  # no stderr with a file descriptor
        return False
    return True


@contextlib.contextmanager
def watching() -> Iterator[None]:
    """Dump the stacks and exit (status 1) if the block does not finish within ``BAGUA_EXIT_TIMEOUT_S``."""
    armed = arm()
    try:
        yield
    finally:
        if armed:
            faulthandler.cancel_dump_traceback_later()
