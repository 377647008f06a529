"""Asynchronous model averaging: a background thread that averages the weights every few ms.

Each round (every ``sync_interval_ms``) the thread snapshots the weights of every bucket, allreduces
the snapshots (SUM, in their own dtype) together with a one-element fp32 "stop" flag, and under the
weight lock applies ``x += reduced / n - snapshot``, which keeps the local progress made since the
snapshot. The rounds use a torch process group of their own, so they never interleave with the
collectives of the bucket worker. The loop ends after the first round in which every rank raised
its stop flag (:meth:`AsyncModelAverager.abort`), so ranks that train different numbers of steps
still agree on when to stop; a rank that has asked to stop keeps joining rounds until then.

With ``weighting="samples"`` each round weights a rank by its throughput ``rho_r = C_r / R_r``: the samples ``C_r``
it trained on since this averager began (:meth:`AsyncModelAverager.add_samples`) over the weighted rounds ``R_r``
it has taken part in, this one included. The round first allreduces (SUM, float64) every ``rho_r``, and every
rank allreduces its snapshot times ``w_r = n * rho_r / sum rho`` (in the weights' dtype; 1 when no rank trained),
so the update is ``x += sum_r rho_r x_r / sum_r rho_r - snapshot``; with equal ``rho_r`` every ``w_r`` is exactly 1
and the round is the equal-weight one, bit for bit. Where every rank has taken part in every round (all but
fault-tolerant mode) ``R_r`` is the same on every rank and the weights are the shares of the samples trained so
far. A round ends at the next forward of every rank (the update waits for the weight lock), so it spans about
one step of the slowest rank: the samples since the previous round alone are whole steps, 1 or 2 of a rank
twice as fast, and would swing the weights between equal and copying one rank's weights to every rank.

If the training thread holds the weight lock when a round finishes, the round's update waits in
``pending`` and whichever thread next holds the lock applies it (``apply_pending``), exactly once.

In fault-tolerant mode (``step_bound``) the rounds run only while every replica is inside a training step:
the runtime stops the loop at the end of each step (:meth:`AsyncModelAverager.stop_for_step`, agreed in the
next round's stop flag) and the next forward starts it again; a round whose collectives failed (a replica
killed or hung) is dropped before anything of it is applied.

On CUDA the rounds run on a stream of their own (after the work the training stream has queued when
the round starts), and updates are applied on the training stream (the one current when
:meth:`AsyncModelAverager.start` ran) after the round's event, so weight updates never race on the
device. Each communicator has a name of its own (``async_model_average/<n>``), so a second wrap never
meets the first one's native NCCL unique id in the store.

Example::

    >>> averager = AsyncModelAverager(buckets, new_async_communicator([0, 1]), sync_interval_ms=100)
    >>> averager.start()
    >>> ...                        # training: hold averager.weight_lock around forward/step
    >>> averager.abort()           # returns once every rank has aborted
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import threading
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from bagua_core.api import (
    BaguaCommunicator,
    JobFailureError,
    ReduceOp,
    allreduce_inplace,
    group_failure,
    settings,
    tensors,
    translate_failure,
)

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.api import BaguaBucket

__all__ = ["AsyncModelAverager", "new_async_communicator"]

_communicator_ids = itertools.count()  # every process creates them in the same order (collective)


def new_async_communicator(ranks: list[int]) -> BaguaCommunicator:
    """A communicator over ``ranks`` on a fresh torch process group; collective: every process of the
    job calls it, in the same order as its other groups (torch's ``new_group`` rule)."""
    timeout = datetime.timedelta(seconds=settings.comm_timeout_s())
    ranks = sorted(ranks)
    group = dist.new_group(ranks, timeout=timeout)
    name = f"async_model_average/{next(_communicator_ids)}"
    return BaguaCommunicator(group if dist.get_rank() in ranks else None, ranks, name)


def _add_to_bucket(bucket: BaguaBucket, delta: torch.Tensor) -> None:
    with torch.no_grad():
        if bucket.check_flatten():
            bucket.buffer[: delta.numel()].add_(delta)
            return
        for index, tensor in enumerate(bucket.tensors):
            tensors.effective(tensor).add_(bucket.slot_of(delta, index))


class AsyncModelAverager:
    """The background averaging loop over ``buckets`` of weights (effective tensor = the weight)."""

    def __init__(self, buckets: list[BaguaBucket], comm: BaguaCommunicator, sync_interval_ms: int,
                 step_bound: bool = False, weighting: str = "equal") -> None:
        self.step_bound = step_bound
        """Fault-tolerant mode (:meth:`stop_for_step`): each round first agrees on the stop flag, and any rank's
        flag stops every rank's loop after that round, with no averaging in it; a round whose collectives
        failed is dropped, nothing of it applied."""
        self._next_round_at = 0.0  # rounds keep sync_interval_ms apart across restarts
        self.buckets = buckets
        self.comm = comm
        self.nranks = comm.nranks()
        self.sync_interval_s = sync_interval_ms / 1000.0
        self.weight_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: list[torch.Tensor] | None = None
        self._pending_event: torch.cuda.Event | None = None  # CUDA: the pending deltas are computed
        self._stream: torch.cuda.Stream | None = None  # CUDA: the rounds' stream
        self._training_stream: torch.cuda.Stream | None = None  # CUDA: where updates are applied
        self._stop_requested = threading.Event()
        self._exiting = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.rounds = 0
        self.averaged = (0, 0)
        """The rounds that averaged the weights (not those that only agreed to stop) and their fp32 bytes."""
        self.weighting = weighting
        """"equal", or "samples": each round weights a rank's snapshot by its samples per round (its throughput)."""
        self._samples = 0  # since this averager began
        self._weighted_rounds = 0
        self._samples_lock = threading.Lock()
        self.last_weight: float | None = None
        """This rank's ``w_r`` in the last weighted round."""

    def add_samples(self, samples: int) -> None:
        """The training thread trained on ``samples`` more samples (counted into every later round's weight)."""
        with self._samples_lock:
            self._samples += samples

    def _round_weight(self) -> float:
        """``weighting="samples"``: this rank's ``w_r = n * rho_r / sum rho`` for the round, ``rho_r`` its samples since
        this averager began over the weighted rounds it has been in, this one included (one allreduce, float64)."""
        self._weighted_rounds += 1
        with self._samples_lock:
            mine = self._samples / self._weighted_rounds
        rates = torch.tensor([mine], dtype=torch.float64)
        allreduce_inplace(rates, op=ReduceOp.SUM, comm=self.comm)
        self._check_group()
        total = float(rates.item())
        weight = self.nranks * mine / total if total > 0 else 1.0
        if abs(weight - 1.0) < 1e-12:  # equal rates, summed in another order: the equal-weight round, bit for bit
            weight = 1.0
        self.last_weight = weight
        return weight

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def add_bucket(self, bucket: BaguaBucket) -> None:
        """Average ``bucket`` too (once; nothing is appended to its operations: the averaging runs in the
        background)."""
        if all(other is not bucket for other in self.buckets):
            self.buckets.append(bucket)

    def start(self) -> None:
        """Start the loop (a daemon thread: it never keeps the interpreter alive)."""
        if self.running:
            return
        self._stop_requested.clear()
        self.error = None
        device = self.buckets[0].device if self.buckets else torch.device("cpu")
        if device.type == "cuda":
            self._training_stream = torch.cuda.current_stream(device)
            if self._stream is None:
                self._stream = torch.cuda.Stream(device=device)
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

    def stop_for_step(self, timeout: float) -> None:
        """Fault-tolerant mode: stop the loop at the end of a step (collective over the quorum's group: the
        first round after this rank's stop ends every rank's loop, :attr:`step_bound`) and re-raise the error
        that ended it, if any; :meth:`start` begins the next step's rounds."""
        if self._thread is not None:
            self._stop_requested.set()
            self._thread.join(timeout)
            if self._thread.is_alive():  # its collective outlived the group's timeout: leave it behind
                self._exiting.set()
                raise TimeoutError(f"async model averaging did not stop within {timeout:g} s")
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

    def lock_weight(self) -> None:
        """Take the weight lock: the averaging does not touch the weights until :meth:`unlock_weight`."""
        self.weight_lock.acquire()

    def unlock_weight(self) -> None:
        """Apply a finished round's update if one waits, then release the weight lock."""
        try:
            self.apply_pending()
        finally:
            self.weight_lock.release()

    def apply_pending(self) -> None:
        """Apply the last round's update if it is still pending (caller holds ``weight_lock``)."""
        with self._pending_lock:
            deltas, self._pending = self._pending, None
            event, self._pending_event = self._pending_event, None
        if deltas is None:
            return
        with self._on_training_stream(event):
            for bucket, delta in zip(self.buckets, deltas):
                _add_to_bucket(bucket, delta)

    @contextlib.contextmanager
    def _on_training_stream(self, event: torch.cuda.Event | None):
        if self._training_stream is None:
            yield
            return
        with torch.cuda.stream(self._training_stream):
            if event is not None:
                self._training_stream.wait_event(event)
            yield

    @contextlib.contextmanager
    def _on_round_stream(self):
        """CUDA: the round's work on its own stream, after what the training stream has queued."""
        if self._stream is None:
            yield
            return
        self._stream.wait_stream(self._training_stream)
        with torch.cuda.stream(self._stream):
            yield

    def _round(self) -> bool:
        """One averaging round; True when every rank asked to stop."""
        with torch.no_grad(), self._on_round_stream():
            flag = torch.tensor([1.0 if self._stop_requested.is_set() else 0.0])  # CPU: gloo, also in CUDA jobs
            if self.step_bound:  # the flag first: a rank ending its step stops every rank's loop
                allreduce_inplace(flag, op=ReduceOp.SUM, comm=self.comm)
                self._check_group()
                if flag.item() >= 1:
                    self.rounds += 1
                    return True
            weight = self._round_weight() if self.weighting == "samples" else 1.0
            snapshots = [bucket.flattened_tensor() for bucket in self.buckets]  # copies
            reduced = [s.clone() if weight == 1.0 else s.mul(weight) for s in snapshots]
            for tensor in reduced:
                allreduce_inplace(tensor, op=ReduceOp.SUM, comm=self.comm)
            if not self.step_bound:
                allreduce_inplace(flag, op=ReduceOp.SUM, comm=self.comm)
            self._check_group()  # a failed round never reaches the weights
            deltas = [r.div_(self.nranks).sub_(s) for r, s in zip(reduced, snapshots)]
            event = None
            if self._stream is not None:
                event = torch.cuda.Event()
                event.record(self._stream)
        with self._pending_lock:
            self._pending = deltas
            self._pending_event = event
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
        self.averaged = (self.averaged[0] + 1, self.averaged[1] + sum(s.numel() * 4 for s in snapshots))
        return int(flag.item()) == self.nranks

    def _check_group(self) -> None:
        """Raise if a collective of this round failed: a fault-tolerant mode's managed group reports a peer's
        failure in its ``error`` and leaves the buffers as they were (partial sums), instead of raising."""
        error = group_failure(self.comm.torch_group)
        if error is not None:
            raise RuntimeError(f"an averaging round between replicas failed, nothing of it is applied: {error}")

    def _loop(self) -> None:
        try:
            while not self._exiting.is_set():
                delay = self._next_round_at - time.monotonic()
                if delay > 0:
                    self._stop_requested.wait(delay)  # once stopping, go straight to the next round
                self._next_round_at = time.monotonic() + self.sync_interval_s
                if self._round():
                    return
        except Exception as exc:  # raised by the training thread at its next forward, or by abort()
            if self.step_bound:  # fault-tolerant mode: the step fails, not the job (translate_failure records that)
                self.error = exc
            else:
                self.error = translate_failure(exc, "an asynchronous model averaging round")
