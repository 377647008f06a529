"""The job's failure record: the first failure of any rank, kept in torch's store so that every rank
can learn it, and this process's view of it.

Store keys (under ``bagua/failure/`` of the default process group's store, so a restarted attempt
under torchelastic starts clean): ``first`` (the first failure, set with ``compare_set``: the first
writer wins), ``rank_<r>`` (rank r's own failure), ``ack_<r>`` (rank r has learned of the failure),
``said_<r>`` (rank r has printed its one line about a failure that began elsewhere).
Store operations use a clone of the store with a short timeout, so reporting never blocks a failing
rank for long, even when the store's host is gone.

Once this process has reported a failure or learned of one, :func:`raise_if_aborted` raises: bagua
issues no further collective on this rank (the peers would pair it with a different one).

Example::

    >>> record = report(exc, "bucket op on the communication thread")   # on the failing rank
    >>> first_failure(of_peer=True)                                     # on a healthy rank
    FailureRecord(rank=1, where='bucket op on the communication thread', cause='RuntimeError: boom', ...)
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket
import threading
import time
from typing import Any

import torch.distributed as dist

from bagua_core.runtime.exceptions import GroupAbortedError, JobFailureError, PeerFailureError
from bagua_core.runtime.failure.abort import abort_process_groups
from bagua_core.runtime.job_store import job_store

__all__ = ["FailureRecord", "first_failure", "is_started", "learn", "raise_if_aborted", "report", "said", "start",
           "state", "stop", "wait_until_said"]

_STORE_TIMEOUT = datetime.timedelta(seconds=5)


@dataclasses.dataclass(frozen=True)
class FailureRecord:
    """One rank's failure: which rank, in what, why, and the process it happened in."""

    rank: int
    where: str
    cause: str
    kind: str = "exception"
    """``exception``, ``timeout`` (a collective timed out), ``lost connection`` or ``interrupted``."""
    host: str = ""
    pid: int = 0

    def describe(self) -> str:
        return f"rank {self.rank} failed first ({self.where}): {self.cause}"

    def to_bytes(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> FailureRecord:
        return cls(**json.loads(raw.decode()))


@dataclasses.dataclass
class _State:
    store: Any = None
    rank: int = 0
    world_size: int = 1
    procs: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    """(host, pid) of every global rank."""
    failure: FailureRecord | None = None
    """The first failure this process knows of (its own or a peer's)."""
    own: bool = False
    """This process reported a failure itself."""
    main_thread_told: bool = False
    """The main thread has raised a failure error already (the watchdog need not interrupt it)."""
    pending_error: BaseException | None = None
    """This rank's own error raised off the main thread (the communication thread, an averaging round):
    the main thread raises it, once, before anything else."""
    line_said: bool = False
    """This process has printed its one line about a failure that began elsewhere (:mod:`.lines`)."""
    started: bool = False
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


state = _State()


def start(rank: int, world_size: int, procs: list[tuple[str, int]]) -> None:
    """Connect to the default process group's store (a clone with a short timeout) for this job."""
    store = None
    try:
        store = dist.PrefixStore("bagua/failure/", job_store().clone())
        store.set_timeout(_STORE_TIMEOUT)
    except Exception:  # a store without clone(): failures are still raised locally, not shared
        store = None
    state.store, state.rank, state.world_size, state.procs = store, rank, world_size, list(procs)
    state.failure, state.own, state.main_thread_told, state.started = None, False, False, True
    state.pending_error, state.line_said = None, False


def stop() -> None:
    """Forget the job (``destroy_process_group``): a later job starts with no failure."""
    state.store, state.failure, state.own, state.main_thread_told, state.started = None, None, False, False, False
    state.pending_error, state.line_said = None, False


def is_started() -> bool:
    return state.started


def this_process() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


def report(cause: str, where: str, kind: str = "exception") -> FailureRecord:
    """Record this rank's failure; the first failure of the job (any rank) stays ``first`` in the
    store. Marks the process aborted. Returns the job's first failure."""
    host, pid = this_process()
    record = FailureRecord(state.rank, where, cause, kind, host, pid)
    with state.lock:
        if state.failure is None:
            state.failure, state.own = record, True
    first = record
    if state.store is not None:
        try:
            state.store.set(f"rank_{state.rank}", record.to_bytes())
            first = FailureRecord.from_bytes(state.store.compare_set("first", "", record.to_bytes()))
            state.store.set(f"ack_{state.rank}", b"1")  # this rank knows (see watchdog.linger)
        except Exception:  # the store's host is gone: this rank's error still says what happened
            pass
    abort_process_groups()
    return first


def learn(record: FailureRecord) -> bool:
    """A peer's failure, found in the store: mark this process aborted. True if it was news."""
    with state.lock:
        if state.failure is not None:
            return False
        state.failure = record
    if state.store is not None:
        try:
            state.store.set(f"ack_{state.rank}", b"1")
        except Exception:
            pass
    abort_process_groups()
    return True


def said() -> None:
    """This rank has printed its line about a failure that began on another rank (:func:`wait_until_said`)."""
    if state.store is not None:
        try:
            state.store.set(f"said_{state.rank}", b"1")
        except Exception:
            pass


def wait_until_said(timeout_s: float, gone: Any = (), ranks: Any = None, cancel: threading.Event | None = None) -> None:
    """On the rank where a failure began, before its process exits: give the other ranks (less ``gone``;
    only ``ranks`` when given) up to ``timeout_s`` to print their line, since a launcher stops the survivors
    once one worker has exited (torchrun does), and a rank stopped first would say nothing. ``cancel``, once
    set, ends the wait."""
    store = state.store
    if store is None:
        return
    keys = [f"said_{rank}" for rank in (range(state.world_size) if ranks is None else ranks)
            if rank != state.rank and rank not in set(gone)]
    deadline = time.monotonic() + timeout_s
    while keys and time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
        try:
            keys = [key for key in keys if not store.check([key])]
        except Exception:
            return
        if keys:
            time.sleep(0.05)


def first_failure(of_peer: bool = False, wait_s: float = 0.0) -> FailureRecord | None:
    """The job's first failure: the one this process knows, else the store's (polled for up to
    ``wait_s`` seconds). ``of_peer``: only a failure of another rank."""
    deadline = time.monotonic() + wait_s
    while True:
        known = state.failure
        if known is not None and (not of_peer or known.rank != state.rank):
            return known
        if state.store is not None:
            try:
                if state.store.check(["first"]):
                    record = FailureRecord.from_bytes(state.store.get("first"))
                    if not of_peer or record.rank != state.rank:
                        return record
            except Exception:  # the store's host is gone
                return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def raise_if_aborted() -> None:
    """Raise when this process failed or learned of a failure: nothing further may be issued."""
    record = state.failure
    if record is None:
        return
    if threading.current_thread() is threading.main_thread():
        state.main_thread_told = True
        pending, state.pending_error = state.pending_error, None
        if pending is not None:
            raise pending
    if record.rank != state.rank:
        raise failure_error(record, PeerFailureError, "bagua issues no further collective on this rank")
    raise GroupAbortedError(
        f"bagua issues no further collective on rank {state.rank}: the job failed, {record.describe()}",
        record.rank, record.where, record.cause,
    )


def failure_error(record: FailureRecord, cls: type[JobFailureError], detail: str = "") -> JobFailureError:
    """The error a healthy rank raises for ``record`` (a peer's failure)."""
    message = f"rank {state.rank} stops: {record.describe()}"
    if record.host and record.pid:
        message += f" [host {record.host}, pid {record.pid}]"
    if detail:
        message += f"; here: {detail}"
    return cls(message, record.rank, record.where, record.cause)
