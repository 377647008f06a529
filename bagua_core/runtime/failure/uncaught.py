"""Uncaught exceptions: the last place a rank's failure is reported before its process exits.

``sys.excepthook`` and ``threading.excepthook`` are chained: an uncaught exception is reported to the job
(so the peers' errors name this rank and the cause), and under torchelastic (``bagua run``) it is written
to the worker's error file, so the launcher's summary shows it as the root cause. Only the rank where a
failure began prints a traceback: a rank that stopped because another one failed (a ``PeerFailureError``,
or an agreement that failed on another rank) prints one line naming that rank and the error's type, after
that rank's traceback, so a failed job's output is one traceback and a line per other rank, the error's
text once, every line with its rank's prefix (``[rank1]: ``, torch's). The error file names the rank whose
traceback shows the failure (``bagua_shown_by``), which the launcher's summary names. An error raised the same way on several ranks
before any collective (a misspelt algorithm name in the script) is one failure: the lowest of those ranks
shows it, the others say in one line that they failed the same way. An error about what the caller asked
for (a bad name or option, ranks that disagree) is shown without the frames of bagua's own checks below
the caller's. Under torchelastic the first rank waits (a few seconds at most) for the other ranks' lines
before it exits, since the launcher then stops the others. ``BAGUA_VERBOSE=1`` (``bagua run --verbose``)
prints every rank's whole traceback.

Example::

    >>> install()          # init_process_group does this
    >>> uninstall()        # destroy_process_group
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from types import TracebackType
from typing import Any

from bagua_core.runtime import env
from bagua_core.runtime.exceptions import (
    BaguaConfigError,
    JobFailureError,
    NotInitializedError,
    PeerFailureError,
    PluginError,
    RankMismatchError,
    RepeatedInitializationError,
)
from bagua_core.runtime.failure.lines import PEERS_LINES_S, kind_of, say, say_stopped
from bagua_core.runtime.failure.record import said, state, wait_until_said
from bagua_core.runtime.failure.translate import lost_peers, translate

__all__ = ["install", "uninstall"]

_previous: dict[str, Any] = {}
_ABOUT_THE_CALLER = (BaguaConfigError, PluginError, RankMismatchError, NotInitializedError,
                     RepeatedInitializationError)
"""Errors about what the caller asked for: their traceback ends at the caller's frame."""


def _kind(translated: BaseException, exc: BaseException) -> tuple[int | None, str]:
    """(the rank that failed first, the type of its error) for a rank that stopped because of it."""
    if isinstance(translated, JobFailureError):
        return translated.failed_rank, kind_of(translated.cause)
    return getattr(exc, "bagua_failed_elsewhere", None), getattr(exc, "bagua_failed_kind", "an error")


def _handle(exc: BaseException | None, where: str) -> bool:
    """Report ``exc``; True when its traceback is not worth printing (one line said it all)."""
    if exc is None or not state.started or isinstance(exc, SystemExit):
        return False
    try:
        translated = translate(exc, where)
        same_as = getattr(exc, "bagua_same_failure_as", None)
        elsewhere = isinstance(translated, PeerFailureError) or getattr(exc, "bagua_failed_elsewhere", None) is not None
        shown_by = same_as if same_as is not None else _kind(translated, exc)[0] if elsewhere else state.rank
        _write_elastic_error_file(translated, shown_by)
        if same_as is not None and not env.verbose():  # one failure on several ranks: its traceback is there
            say_stopped(same_as, type(exc).__name__,  # after rank same_as's cause and traceback
                        f"bagua: failed the same way as rank {same_as} ({type(exc).__name__})")
            if os.environ.get("TORCHELASTIC_RUN_ID"):  # torchrun stops the others once this one exits: let
                time.sleep(_AFTER_ORIGIN_S)  # rank same_as exit first (the launcher reports its exit status)
            return True
        if elsewhere and not env.verbose():  # its line, unless the watchdog printed it while this thread was blocked
            origin, kind = _kind(translated, exc)
            say_stopped(origin, kind, None if origin is not None else
                        f"bagua: stopped: {type(translated).__name__}: {str(translated).strip().splitlines()[0]}")
            return True
        if translated is not exc:
            say(f"bagua: {translated}")
    except Exception:  # never hide the original traceback
        pass
    return False


def _write_elastic_error_file(exc: BaseException, shown_by: int | None) -> None:
    """The format of torchelastic's ``ErrorHandler.record_exception``, with this exception's traceback, and
    ``bagua_shown_by``: the rank whose traceback shows this failure (the launcher reports that rank)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):  # not under torchelastic, or @record already wrote it
        return
    callstack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    data = {"message": {"message": f"{type(exc).__name__}: {exc}",
                        "extraInfo": {"py_callstack": callstack, "timestamp": str(int(time.time())),
                                      "bagua_shown_by": shown_by}}}
    partial = f"{path}.{os.getpid()}.partial"  # torchrun reads the file of a worker it is killing: never half of it
    with open(partial, "w") as fh:
        json.dump(data, fh)
    os.replace(partial, path)


# how long a rank that failed the same way as another waits, once that one has printed, before exiting
_AFTER_ORIGIN_S = 0.5


def _without_bagua_frames(exc: BaseException, tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the frames of bagua_core below the caller's last one, for an error about what the caller
    asked for (a misspelt name, a bad option, ranks that disagree): its message says what to do, and the
    frames of the checks that raised it do not. Unchanged for any other error and under ``BAGUA_VERBOSE``."""
    if env.verbose() or not isinstance(exc, _ABOUT_THE_CALLER):
        return tb
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    callers = [i for i, t in enumerate(frames)
               if not str(t.tb_frame.f_globals.get("__name__", "")).startswith("bagua_core.")]
    if not callers or callers[-1] == len(frames) - 1:
        return frames[0] if frames else None
    shown: TracebackType | None = None
    for t in reversed(frames[: callers[-1] + 1]):
        shown = TracebackType(shown, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return shown


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if not _handle(exc, "an uncaught exception in the main thread"):
        shown = _without_bagua_frames(exc, tb)
        _previous["sys"](exc_type, exc.with_traceback(shown), shown)  # the printer reads the exception's own
        if state.started:
            said()  # the ranks that failed the same way wait for this traceback
        if state.started and state.world_size > 1 and os.environ.get("TORCHELASTIC_RUN_ID") \
                and not isinstance(exc, (SystemExit, KeyboardInterrupt)):
            wait_until_said(PEERS_LINES_S, gone=lost_peers())  # torchrun stops the others once this one exits


def _threading_excepthook(args: threading.ExceptHookArgs) -> None:
    name = args.thread.name if args.thread is not None else "a thread"
    if not _handle(args.exc_value, f"an uncaught exception in thread {name!r}"):
        _previous["threading"](args)


def install() -> None:
    if "sys" not in _previous:
        _previous["sys"], sys.excepthook = sys.excepthook, _excepthook
        _previous["threading"], threading.excepthook = threading.excepthook, _threading_excepthook


def uninstall() -> None:
    if "sys" in _previous:
        if sys.excepthook is _excepthook:
            sys.excepthook = _previous["sys"]
        if threading.excepthook is _threading_excepthook:
            threading.excepthook = _previous["threading"]
        _previous.clear()
