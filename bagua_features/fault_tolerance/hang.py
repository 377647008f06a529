"""A replica that hangs inside a step leaves the job, so the others are not held back by it.

torchft's lighthouse keeps a replica whose manager still heartbeats in the quorum's count, and the
manager's heartbeat comes from a thread of its own: a replica whose training thread is stuck (a dead
lock, a stalled data loader, a stopped device) would keep a two-replica job from forming a quorum
without it. :class:`HangWatchdog` watches the step transaction: a step still open ``hang_timeout_s``
after its quorum was formed makes this replica report it on stderr and exit with :data:`HUNG_EXIT_CODE`
(its heartbeat stops with it; ``bagua run --fault-tolerant`` restarts it, and it heals from a live peer).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

__all__ = ["HangWatchdog", "HUNG_EXIT_CODE"]

HUNG_EXIT_CODE = 75
"""Exit status of a replica that left because one of its steps hung."""


class HangWatchdog:
    """Exit the process when ``open_since()`` (the monotonic time the current step's quorum was formed,
    None between steps) is older than ``hang_timeout_s``."""

    def __init__(self, hang_timeout_s: float, open_since: Callable[[], float | None], describe: Callable[[], str]) -> None:
        self.hang_timeout_s = hang_timeout_s
        self._open_since = open_since
        self._describe = describe
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bagua-ft-hang-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = min(1.0, self.hang_timeout_s / 4)
        while not self._stop.wait(period):
            since = self._open_since()
            if since is not None and time.monotonic() - since > self.hang_timeout_s:
                sys.stderr.write(f"bagua: fault-tolerant replica {self._describe()} hung: its step has not finished "
                                 f"within hang_timeout_s={self.hang_timeout_s:g} s (BAGUA_FT_HANG_TIMEOUT_S); it leaves "
                                 f"the job (exit code {HUNG_EXIT_CODE}) so the others form a quorum without it\n")
                sys.stderr.write(_where_the_training_thread_is())
                sys.stderr.flush()
                os._exit(HUNG_EXIT_CODE)

    def stop(self) -> None:
        self._stop.set()


def _where_the_training_thread_is() -> str:
    """The main thread's innermost frames (where the step hung), for the replica's last words."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return ""
    lines = traceback.format_stack(frame)[-8:]
    return "bagua: the training thread was at (innermost last):\n" + "".join(lines)
