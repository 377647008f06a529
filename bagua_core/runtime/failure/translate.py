"""What a rank raises when something fails while training: its own error, or one naming the rank that
failed first and why.

:func:`translate` is applied where bagua's work surfaces to the caller (the module's hooks, the
communication thread, asynchronous averaging rounds, the public collectives, uncaught exceptions):

- an error of this rank's own (an exception in a bucket op, a bad value, an interrupt) is reported
  (:func:`bagua_core.runtime.failure.record.report`) and raised unchanged;
- a collective that failed because a peer failed first (its connections closed) becomes a
  :class:`~bagua_core.runtime.exceptions.PeerFailureError` naming that rank, where it failed and why;
- a collective that timed out with no failure recorded becomes a
  :class:`~bagua_core.runtime.exceptions.CommunicationTimeoutError` (reported, so the peers learn it);
- a lost connection with no failure recorded becomes a :class:`~bagua_core.runtime.exceptions.CommunicationError`
  naming the ranks on this host whose process is gone (killed or crashed without reporting).

Errors raised identically on every rank by an agreement (``bagua_coordinated``) pass through untouched.

Example::

    >>> with guard("the forward pre-hook"):
    ...     run_the_hook()
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import torch.distributed as dist

from bagua_core.runtime import env
from bagua_core.runtime.exceptions import CommunicationError, CommunicationTimeoutError, JobFailureError, PeerFailureError
from bagua_core.runtime.failure.record import failure_error, first_failure, learn, raise_if_aborted, report, state

__all__ = ["PEER_RECORD_WAIT_S", "Guard", "guard", "is_communication_error", "lost_peers", "translate"]

PEER_RECORD_WAIT_S = 2.0
"""How long a rank whose collective failed waits for the failing peer's record before it names a lost
connection instead."""

_COMMUNICATION_MARKERS = ("gloo", "Gloo", "NCCL", "nccl", "Connection closed", "Connection reset", "Connection refused",
                          "Broken pipe", "Timed out", "timed out", "Timeout", "timeout", "ProcessGroup", "c10d",
                          "pair closure")
_TIMEOUT_MARKERS = ("Timed out", "timed out", "Timeout", "timeout")


def is_communication_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a collective or point-to-point operation that could not complete."""
    if isinstance(exc, JobFailureError):
        return False
    if isinstance(exc, dist.DistError):
        return True
    if isinstance(exc, TimeoutError):  # a wait for the peers that gave up
        return True
    if isinstance(exc, (RuntimeError, ConnectionError)):
        text = str(exc)
        return any(marker in text for marker in _COMMUNICATION_MARKERS)
    return False


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or any(marker in str(exc) for marker in _TIMEOUT_MARKERS)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has exited
    except (OSError, IndexError):
        return True


def lost_peers() -> list[int]:
    """Ranks on this host whose process has exited (the others cannot be checked from here)."""
    host = socket.gethostname()
    return [rank for rank, (rank_host, pid) in enumerate(state.procs)
            if rank != state.rank and rank_host == host and pid and not _alive(pid)]


def _short(exc: BaseException) -> str:
    """``Type: message``, without gloo's source path prefix and its generic advice."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    text = text.split(". This is typically caused", 1)[0]
    return f"{type(exc).__name__}: {text[:300]}"


def translate(exc: BaseException, where: str) -> BaseException:
    """The error to raise for ``exc``, which happened in ``where`` on this rank (see the module doc)."""
    if not state.started or getattr(exc, "bagua_coordinated", False) or isinstance(exc, JobFailureError):
        return exc
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:
        state.main_thread_told = True
    if getattr(exc, "bagua_reported", False):
        return exc
    if not is_communication_error(exc):
        report(f"{type(exc).__name__}: {exc}", where, "interrupted" if isinstance(exc, KeyboardInterrupt) else "exception")
        try:
            exc.bagua_reported = True  # type: ignore[attr-defined]
        except AttributeError:  # an exception type with __slots__
            pass
        if not in_main_thread and state.pending_error is None:
            state.pending_error = exc  # the main thread raises it at its next bagua call
        return exc
    me = state.rank
    # A failing rank writes its record before its connections close, so a record is on its way: on a
    # loaded machine the store (served by rank 0's process) can take over half a second to show it, and
    # reading too early named a lost connection instead of the peer's error. Only a rank that died
    # without a record (kill -9) costs the whole wait.
    peer = first_failure(of_peer=True, wait_s=PEER_RECORD_WAIT_S)
    error: JobFailureError
    if peer is not None:
        learn(peer)
        error = failure_error(peer, PeerFailureError, f"{where} failed: {_short(exc)}")
    elif _is_timeout(exc):
        cause = (f"a collective did not complete within BAGUA_COMM_TIMEOUT_S={env.get_comm_timeout_s():g} s: a peer "
                 f"is hung, much slower, or issued a different collective ({_short(exc)})")
        report(cause, where, "timeout")
        error = CommunicationTimeoutError(f"rank {me} timed out in {where}: {cause}", me, where, cause)
    else:
        gone = lost_peers()
        if gone:
            what = ", ".join(f"rank {r} (pid {state.procs[r][1]})" for r in gone)
            cause = f"{what} exited without reporting an error (killed, or crashed outside Python)"
        else:
            cause = "a peer closed its connection (it exited or was killed, or its host is unreachable)"
        report(f"lost connection: {cause}", where, "lost connection")
        error = CommunicationError(f"rank {me} lost a connection in {where}: {cause} ({_short(exc)})", me, where, cause)
    return error


@contextlib.contextmanager
def guard(where: str) -> Iterator[None]:
    """Refuse to start after a failure; translate what the block raises (see :func:`translate`)."""
    if state.failure is not None:
        raise_if_aborted()
    try:
        yield
    except BaseException as exc:
        translated = translate(exc, where)
        if translated is exc:
            raise
        raise translated from exc


class Guard:
    """:func:`guard` as a plain object, made once (per hook) and entered at every call: a generator-free context
    manager, cheap enough for per-parameter hooks, and the guarded call is the next frame a traceback (or a reader
    following the call) sees.

    Example::

        >>> backward_guard = Guard("the backward hook of a wrapped module")
        >>> with backward_guard:
        ...     hooks.backward(name, param)
    """

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        if state.failure is not None:
            raise_if_aborted()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            return False
        translated = translate(exc, self.where)
        if translated is exc:
            return False
        raise translated from exc
