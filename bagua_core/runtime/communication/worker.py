"""A background thread per process group that runs bucket communication in submission order.

Bucket operations are submitted while backward is still running and execute on this thread, so
communication overlaps computation; a single thread keeps the order of collectives identical on
every rank (which gloo and NCCL both require). After an operation fails, the thread runs nothing
further (a later bucket's collective would pair with a different one on the peers): every later
operation fails with a ``GroupAbortedError`` naming the first failure, which is reported to the
job (:mod:`bagua_core.runtime.failure`).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any
from collections.abc import Callable

import torch

from bagua_core.runtime import failure
from bagua_core.runtime.communication import streams
from bagua_core.runtime.exceptions import GroupAbortedError

__all__ = ["CommunicationWorker"]


class CommunicationWorker:
    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._pending: list[Future] = []
        self._lock = threading.Lock()
        self.failed: BaseException | None = None
        """The error of the first operation that failed; nothing runs after it."""
        self._cuda_streams: dict[int, Any] = {}

    def cuda_stream(self, device: Any) -> Any:
        """The stream this group's bucket operations run on for CUDA ``device`` (created on first use;
        one per group, so two groups' native NCCL work never queues on one stream in rank-dependent order)."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        stream = self._cuda_streams.get(index)
        if stream is None:
            stream = self._cuda_streams[index] = streams.new_stream(torch.device("cuda", index))
        return stream

    def _ensure_started(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=f"bagua-comm-{self.name}", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            if self.failed is not None:
                future.set_exception(GroupAbortedError(
                    f"not run: an earlier operation on the communication thread {self.name!r} failed ({self.failed})"
                ))
                continue
            try:
                failure.raise_if_aborted()
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever waits
                translated = failure.translate(exc, f"a bucket operation on the communication thread {self.name!r}")
                if translated is not exc:
                    translated.__cause__ = exc
                self.failed = translated
                future.set_exception(translated)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` on the worker thread after everything submitted before it."""
        future: Future = Future()
        with self._lock:
            self._ensure_started()
            self._pending.append(future)
            self._queue.put((future, fn, args))
        return future

    def synchronize(self) -> None:
        """Wait for everything submitted so far; re-raise the first failure."""
        with self._lock:
            pending, self._pending = self._pending, []
        first_error: BaseException | None = None
        for future in pending:
            exc = future.exception()
            if exc is not None and first_error is None:
                first_error = exc
        if first_error is not None:
            raise first_error

    def shutdown(self, wait: bool = True) -> None:
        """Stop the thread after what was submitted; ``wait=False``: do not wait for it (after a failure
        it may be blocked in a collective that its peers will never join; it is a daemon)."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            if wait:
                self._thread.join(timeout=10)
        self._thread = None
