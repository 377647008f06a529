"""One set of emulated hosts per machine: a lock around bringing them up and using them.

The emulated hosts have fixed names (namespaces ``bgh1..N``, bridge ``bgbr0``, addresses
``10.77.0.<i>``), so two benchmark runs (or a run and ``tests/test_delay_link.py``) on one machine
would tear down each other's network. :func:`hosts_lock` serialises them with an exclusive
``flock`` on ``$BAGUA_HOSTS_LOCK`` (default ``/tmp/bagua-emulated-hosts.lock``); it is re-entrant
within a process (``netns_link`` falls back to ``delay_link`` while holding it).

Example::

    >>> with hosts_lock():
    ...     pass  # bring the hosts up, run, bring them down
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Iterator

__all__ = ["hosts_lock"]

_held = 0


@contextlib.contextmanager
def hosts_lock() -> Iterator[None]:
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    path = os.environ.get("BAGUA_HOSTS_LOCK", "/tmp/bagua-emulated-hosts.lock")
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            started = time.monotonic()
            print(f"waiting for another run's emulated hosts to come down ({path})", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print(f"emulated hosts free after {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        _held = 1
        try:
            yield
        finally:
            _held = 0
    finally:
        os.close(fd)  # releases the lock
