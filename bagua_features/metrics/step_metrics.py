"""``StepMetrics``: what a wrapped module's steps and rounds cost, recorded while a script asks for it
(``model.bagua_metrics()``); until then the hooks collect nothing.

Per step (``StepRecord``), a window from the end of the previous step (every optimizer of the module stepped)
to the end of this one:

- ``exposed_comm_s``: seconds the training thread spent inside bagua's hooks (the forward pre-hook, the
  per-parameter backward hooks that launch buckets, the end of backward that waits for them, the optimizer
  step hooks): the communication the step did not overlap with computation, plus what an algorithm runs on
  that thread (encoding, an outer step). Fault-tolerant mode's quorum (its own hook) is not in it;
- ``bytes``: the bytes this process handed to collectives (``bagua_core.runtime.communication.stats``, the
  counters ``bagua train`` reports; every module and background thread of the process);
- ``loss``: what the script noted with :meth:`StepMetrics.note_loss`, or None.

Per round (``RoundRecord``): an algorithm that communicates in rounds reports them
(``AlgorithmImpl.rounds_completed``, ``bagua_core.lifecycle.rounds``); for the others every step that handed
bytes to a collective is a round, of its buckets' bytes. ``compression_ratio`` is the round's full-precision
bytes over the bytes handed to collectives since the round before (1 for a full-precision allreduce; an
exchange sending twice, bytegrad's alltoall and allgather, counts both); in fault-tolerant mode each round
carries this replica's counts so far of discarded steps, replicas lost and joined, and heals.

A record reaches the sinks (a ``TensorBoardWriter``) when the next step begins or at :meth:`flush`, so a loss
noted after ``optimizer.step()`` still belongs to its step. Nothing here issues a collective.

Example::

    >>> metrics = model.bagua_metrics()
    >>> loss.backward(); optimizer.step(); metrics.note_loss(loss)
    >>> metrics.flush(); metrics.steps[-1].bytes
    1320
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from bagua_features.fault_tolerance import current_runtime
from bagua_core.lifecycle.rounds import RoundCount
from bagua_core.runtime.communication import stats

__all__ = ["RoundRecord", "StepMetrics", "StepRecord", "fault_tolerance_counts"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    step: int
    """The module's training step (``bagua_train_step_counter``)."""
    exposed_comm_s: float
    """Seconds the training thread spent in bagua's hooks in this step."""
    bytes: int
    """Bytes this process handed to collectives in this step."""
    loss: float | None
    """The loss noted for this step (:meth:`StepMetrics.note_loss`), or None."""


@dataclass(frozen=True, slots=True)
class RoundRecord:
    round: int
    """Rounds recorded so far by this ``StepMetrics``, this one included."""
    step: int
    """The training step at whose end the round was complete."""
    bytes: int
    """Bytes handed to collectives since the round before."""
    dense_bytes: int
    """What a full-precision exchange of the round's tensors would have handed to collectives."""
    compression_ratio: float
    """``dense_bytes / bytes`` (nan when nothing was handed)."""
    fault_tolerance: dict[str, int] | None
    """Fault-tolerant mode: this replica's ``steps_discarded``, ``replicas_lost``, ``replicas_joined`` and ``heals``
    so far; None in fail-fast mode."""


def fault_tolerance_counts() -> dict[str, int] | None:
    """This replica's failures, restarts and heals so far, as fault-tolerant mode counts them; None outside it."""
    runtime = current_runtime()
    if runtime is None:
        return None
    counted = runtime.stats
    return {"steps_discarded": counted["discarded"], "replicas_lost": counted["replicas_lost"],
            "replicas_joined": counted["replicas_joined"], "heals": counted["healed"]}


class StepMetrics:
    """The records of one wrapped module (``model.bagua_metrics()`` returns it): the last ``history`` steps and
    rounds in :attr:`steps` and :attr:`rounds`, totals in :meth:`totals`, each record handed to the sinks."""

    def __init__(self, history: int = 10_000) -> None:
        if history < 1:
            raise ValueError(f"history must be a positive integer, got {history}")
        self.steps: deque[StepRecord] = deque(maxlen=history)
        self.rounds: deque[RoundRecord] = deque(maxlen=history)
        self.sinks: list[Any] = []
        self._faults_seen = 0  # of the runtime's faults, those handed to the sinks (every one of the process's)
        self._bytes_mark = stats.total_bytes()
        self._round_bytes = 0
        self._step: int | None = None  # the open step
        self._ended: dict[str, Any] | None = None  # the ended step, until the next begins (its loss may come)
        self._loss: Any = None
        self._impl_id: int | None = None
        self._seen = RoundCount(0, 0)
        self._totals = {"steps": 0, "exposed_comm_s": 0.0, "bytes": 0, "rounds": 0, "round_bytes": 0,
                        "dense_bytes": 0}

    # --- what the metrics feature calls ----------------------------------------------------------------------
    @property
    def open_step(self) -> int | None:
        """The step begun and not ended yet (its optimizers did not all step), or None."""
        return self._step

    def begin_step(self, step: int) -> None:
        """A training forward starts step ``step``: the record of the step before reaches the sinks."""
        self._emit_step()
        self._step = step

    def end_step(self, step: int, exposed_s: float, impl: Any, buckets: Any) -> None:
        """Every optimizer of the module stepped in step ``step``: close the step's window (``exposed_s``: the seconds
        in bagua's hooks since the last end), and a round if one completed (``impl.rounds_completed()``; else a step
        that handed bytes is a round of ``buckets``' bytes)."""
        if self._step is None:  # collecting began inside this step
            self._step = step
        total = stats.total_bytes()
        handed = total - self._bytes_mark if total >= self._bytes_mark else total  # (stats.reset() in between)
        self._bytes_mark = total
        self._round_bytes += handed
        self._ended = {"step": self._step, "exposed_comm_s": exposed_s, "bytes": handed}
        self._step = None
        self._count_rounds(step, impl, buckets, handed)

    def _count_rounds(self, step: int, impl: Any, buckets: Any, handed: int) -> None:
        count = impl.rounds_completed()  # (AlgorithmImpl: None by default)
        if count is None:  # each step that communicates is a round, of its buckets' bytes
            if handed > 0:
                self._add_round(step, sum(b.bytes() for b in buckets))
            return
        if id(impl) != self._impl_id:  # a new impl (a quorum's, auto's choice) counts from its start
            self._impl_id, self._seen = id(impl), RoundCount(0, 0)
        if count.rounds > self._seen.rounds:
            dense = count.dense_bytes - self._seen.dense_bytes
            self._seen = count
            self._add_round(step, dense)

    def _add_round(self, step: int, dense_bytes: int) -> None:
        handed, self._round_bytes = self._round_bytes, 0
        ratio = dense_bytes / handed if handed > 0 else math.nan
        record = RoundRecord(self._totals["rounds"] + 1, step, handed, dense_bytes, ratio, fault_tolerance_counts())
        self._totals["rounds"] += 1
        self._totals["round_bytes"] += handed
        self._totals["dense_bytes"] += dense_bytes
        self.rounds.append(record)
        for sink in self.sinks:
            sink.write_round(record)

    def _emit_step(self) -> None:
        ended, self._ended = self._ended, None
        if ended is None:
            return
        loss, self._loss = self._loss, None
        if isinstance(loss, torch.Tensor):
            loss = float(loss.detach().float().mean().item())
        record = StepRecord(ended["step"], ended["exposed_comm_s"], ended["bytes"],
                            float(loss) if loss is not None else None)
        self._totals["steps"] += 1
        self._totals["exposed_comm_s"] += record.exposed_comm_s
        self._totals["bytes"] += record.bytes
        self.steps.append(record)
        runtime = current_runtime()
        faults = runtime.faults[self._faults_seen:] if runtime is not None else []
        self._faults_seen += len(faults)
        for sink in self.sinks:
            sink.write_step(record)
            if faults and hasattr(sink, "write_faults"):
                sink.write_faults(record.step, faults)

    @property
    def faults(self) -> list[dict[str, Any]]:
        """Fault-tolerant mode: the faults this replica went through, handed to the sinks (``write_faults``) with
        the step at whose end they were seen (``kind``: ``replica_lost``, ``step_failed`` or ``quorum_changed``
        with the ``stall_s`` it cost, ``healed`` with ``heal_s``: ``FaultTolerantRuntime.faults``); [] outside it."""
        runtime = current_runtime()
        return list(runtime.faults[:self._faults_seen]) if runtime is not None else []

    # --- what a script calls ------------------------------------------------------------------------
    def note_loss(self, loss: float | torch.Tensor) -> None:
        """The loss of the current step (the last one noted wins): a float, or a tensor (its mean, read when the
        step's record is made, at the next step's forward, not now)."""
        self._loss = loss.detach() if isinstance(loss, torch.Tensor) else float(loss)

    def flush(self) -> None:
        """Hand the ended step's record to the sinks now (else the next step does) and flush them."""
        self._emit_step()
        for sink in self.sinks:
            sink.flush()

    def close(self) -> None:
        """Flush, then close and drop the sinks (a writer's file is complete)."""
        self.flush()
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            sink.close()

    def totals(self) -> dict[str, Any]:
        """Sums over every step and round recorded (not only the last ``history``): ``steps``, ``exposed_comm_s``,
        ``bytes``, ``rounds``, ``round_bytes``, ``dense_bytes`` and ``compression_ratio`` (their ratio; nan before a
        round handed anything)."""
        totals = dict(self._totals)
        totals["compression_ratio"] = totals["dense_bytes"] / totals["round_bytes"] if totals["round_bytes"] else math.nan
        return totals
