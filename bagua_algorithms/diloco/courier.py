"""``Courier``: the round's exchanges run on a thread of their own, so that encoding, the collective and decoding
leave the training thread free while a round's exchange travels (``overlap_steps`` > 0).

One daemon thread per impl takes the jobs in the order they were handed over, one after another, so every rank
issues the algorithm group's collectives in the same order (the training thread issues none on that group while
the courier has work); their bytes are counted by the training thread as it hands a job over, in the step that
sends it (``FragmentExchange.record``), never here. A job's result, or its exception, is its ``Future``'s: the
training thread reads it when it merges, and an exception is raised there, where the core reports it as the step's
failure. The thread is a daemon: an exchange stuck on a dead peer never keeps the process from exiting.

Example::

    >>> courier = Courier()
    >>> future = courier.submit(lambda: exchange.start(delta) or exchange.wait())
    >>> ...                                           # inner steps
    >>> average = future.result()
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["Courier"]


class Courier:
    """Runs jobs one after another on a daemon thread, started with the first job."""

    def __init__(self, name: str = "bagua-diloco-exchange") -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], Any]) -> Future:
        """Run ``job()`` after the jobs handed over before it; its ``Future`` holds what it returns or raises."""
        future: Future = Future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._jobs.put((job, future))
        return future

    def close(self) -> None:
        """Let the thread end after the jobs handed over (it is not waited for)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:  # the training thread raises it when it reads the result
                future.set_exception(exc)
