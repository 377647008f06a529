"""The one line a rank prints about a failure that began on another rank, once per job (``state.line_said``).

Both the uncaught-exception hook (:mod:`.uncaught`, when the rank's main thread raises the peer's failure) and
the watchdog (:mod:`.watchdog`, when the main thread has not raised within its grace: it is blocked in a
collective that gloo cannot abort, and will only return once the failing rank has exited) may print it;
whichever comes first does, after the failing rank's traceback (``said_<rank>`` in the failure store), and
marks it said, so that the failing rank may exit.

Example::

    >>> say_stopped(1, "ValueError")     # "[rank0]: bagua: stopped: rank 1 failed first (ValueError)"
    True
    >>> say_stopped(1, "ValueError")     # said already: nothing printed
    False
"""

from __future__ import annotations

import sys
import threading
import time

from bagua_core.runtime.failure.record import said, state, wait_until_said

__all__ = ["PEERS_LINES_S", "PUMPED_S", "kind_of", "say", "say_stopped"]

PEERS_LINES_S = 10.0
"""How long the rank where a failure began waits, before exiting, for the others to print their line."""
PUMPED_S = 0.2
"""Once the rank that shows a failure has printed its traceback, how long the others wait before their line, so
that the launcher (which reads every worker's output in a thread of its own) prints that traceback first."""

_lock = threading.Lock()


def say(text: str) -> None:
    """Write ``text`` to stderr with this rank's prefix on every line (torch's ``[rank1]: ``, as its traceback)."""
    prefix = f"[rank{state.rank}]: "
    print("\n".join(prefix + line for line in text.splitlines()), file=sys.stderr, flush=True)


def kind_of(cause: str) -> str:
    """The type of the error a failure record's ``cause`` (``"ValueError: bad batch"``) names."""
    return cause.split(":", 1)[0].strip() or "an error"


def say_stopped(origin: int | None, kind: str, text: str | None = None, cancel: threading.Event | None = None) -> bool:
    """Print this rank's line about rank ``origin``'s failure (``text``, else "stopped: rank ``origin`` failed first
    (``kind``)"), once it has printed its traceback, and mark it said. False when this process said it already."""
    with _lock:
        if state.line_said:
            return False
        if origin is not None:  # its traceback first: this line refers to it
            wait_until_said(PEERS_LINES_S, ranks=[origin], cancel=cancel)
            time.sleep(PUMPED_S)
        say(text if text is not None else f"bagua: stopped: rank {origin} failed first ({kind})")
        state.line_said = True
    said()
    return True

