"""Asynchronous model averaging: a background thread that averages the weights every few ms.

Each round (every ``sync_interval_ms``) the thread snapshots the weights of every bucket, allreduces
the snapshots (SUM, in their own dtype) together with a one-element fp32 "stop" flag, and under the
weight lock applies ``x += reduced / n - snapshot``, which keeps the local progress made since the
snapshot. The rounds use a torch process group of their own, so they never interleave with the
collectives of the bucket worker. The loop ends after the first round in which every rank raised
its stop flag (:meth:`AsyncModelAverager.abort`), so ranks that train different numbers of steps
still agree on when to stop; a rank that has asked to stop keeps joining rounds until then.

If the training thread holds the weight lock when a round finishes, the round's update waits in
``pending`` and whichever thread next holds the lock applies it (``apply_pending``), exactly once.

Example::

    >>> averager = AsyncModelAverager(buckets, new_async_communicator([0, 1]), sync_interval_ms=100)
    >>> averager.start()
    >>> ...                        # training: hold averager.weight_lock around forward/step
    >>> averager.abort()           # returns once every rank has aborted
"""

from __future__ import annotations

import datetime
import threading
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from bagua_core import env, failure
from bagua_core.communication import ReduceOp, allreduce_inplace
from bagua_core.communication.communicator import BaguaCommunicator
from bagua_core.exceptions import JobFailureError

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.bucket import BaguaBucket

__all__ = ["AsyncModelAverager", "new_async_communicator"]


def new_async_communicator(ranks: list[int]) -> BaguaCommunicator:
    """A communicator over ``ranks`` on a fresh torch process group; collective: every process of the
    job calls it, in the same order as its other groups (torch's ``new_group`` rule)."""
    timeout = datetime.timedelta(seconds=env.get_comm_timeout_s())
    ranks = sorted(ranks)
    group = dist.new_group(ranks, timeout=timeout)
    return BaguaCommunicator(group if dist.get_rank() in ranks else None, ranks, "async_model_average")


def _add_to_bucket(bucket: BaguaBucket, delta: torch.Tensor) -> None:
    with torch.no_grad():
        if bucket.check_flatten():
            bucket.flattened_tensor().add_(delta)
            return
        for tensor, offset, numel in zip(bucket.tensors, bucket.offsets, bucket.numels):
            effective = tensor.bagua_getter_closure()
            effective.add_(delta[offset : offset + numel].view_as(effective))


class AsyncModelAverager:
    """The background averaging loop over ``buckets`` of weights (effective tensor = the weight)."""

    def __init__(self, buckets: list[BaguaBucket], comm: BaguaCommunicator, sync_interval_ms: int) -> None:
        self.buckets = buckets
        self.comm = comm
        self.nranks = comm.nranks()
        self.sync_interval_s = sync_interval_ms / 1000.0
        self.weight_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: list[torch.Tensor] | None = None
        self._stop_requested = threading.Event()
        self._exiting = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.rounds = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the loop (a daemon thread: it never keeps the interpreter alive)."""
        if self.running:
            return
        self._stop_requested.clear()
        self.error = None
        self._thread = threading.Thread(target=self._loop, name="bagua-async-model-average", daemon=True)
        self._thread.start()

    def abort(self, timeout: float | None = None) -> None:
        """Raise this rank's stop flag and wait until every rank's loop has stopped (collective)."""
        if not self.running:
            self.start()  # join the rounds so the other ranks can agree to stop
        self._stop_requested.set()
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("async model averaging did not stop: not every rank has called abort()")
        self._thread = None
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        """Re-raise the error that ended the loop, if any."""
        if self.error is not None:
            error, self.error = self.error, None
            if isinstance(error, JobFailureError):  # names the rank that failed first
                raise error
            raise RuntimeError(f"async model averaging failed: {error}") from error

    def stop_locally(self, timeout: float) -> None:
        """Stop after the current round without agreeing with the other ranks (interpreter exit)."""
        self._exiting.set()
        self._stop_requested.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def apply_pending(self) -> None:
        """Apply the last round's update if it is still pending (caller holds ``weight_lock``)."""
        with self._pending_lock:
            deltas, self._pending = self._pending, None
        if deltas is not None:
            for bucket, delta in zip(self.buckets, deltas):
                _add_to_bucket(bucket, delta)

    def _round(self) -> bool:
        """One averaging round; True when every rank asked to stop."""
        with torch.no_grad():
            snapshots = [bucket.flattened_tensor().detach().clone() for bucket in self.buckets]
            reduced = [s.clone() for s in snapshots]
            flag = torch.tensor([1.0 if self._stop_requested.is_set() else 0.0])
            for tensor in reduced:
                allreduce_inplace(tensor, op=ReduceOp.SUM, comm=self.comm)
            allreduce_inplace(flag, op=ReduceOp.SUM, comm=self.comm)
            deltas = [r.div_(self.nranks).sub_(s) for r, s in zip(reduced, snapshots)]
        with self._pending_lock:
            self._pending = deltas
        while not self._exiting.is_set():  # the training thread may apply it first, at its next forward
            if self.weight_lock.acquire(timeout=0.01):
                try:
                    self.apply_pending()
                finally:
                    self.weight_lock.release()
                break
            with self._pending_lock:
                if self._pending is None:
                    break
        self.rounds += 1
        return int(flag.item()) == self.nranks

    def _loop(self) -> None:
        try:
            while not self._exiting.is_set():
                started = time.monotonic()
                if self._round():
                    return
                delay = self.sync_interval_s - (time.monotonic() - started)
                if delay > 0:
                    self._stop_requested.wait(delay)  # once stopping, go straight to the next round
        except Exception as exc:  # raised by the training thread at its next forward, or by abort()
            self.error = failure.translate(exc, "an asynchronous model averaging round")
