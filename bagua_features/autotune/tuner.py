"""Autotuning: pick the bucket size (and hierarchical on/off where it applies) from measured step time.

Off by default: the feature ``autotune`` (``bagua_features.autotune.feature``). ``BAGUA_AUTOTUNE=1`` turns it on
for every wrapped module, ``with_bagua(..., features={"autotune": {...}})`` for one (or call
:func:`~bagua_features.autotune.feature.configure` on one wrapped module). After ``warmup_steps`` train steps, each candidate is applied in
turn (the forward pre-hook rebuilds the buckets) for ``trial_steps`` steps; a step's time is the time
between two forward pre-hooks, the first step of a trial (it pays the rebuild) is not counted.
Then every rank's mean step time per candidate is allreduced with MAX (float64, on the group's
communication thread, after any pending bucket op), rank 0 picks the fastest candidate and
broadcasts its index (int64), and that choice is applied on every rank and kept for the rest of
training. No extra server process is needed. Everything is logged on logger ``bagua.autotune``.

Applies to algorithms declaring ``Capabilities.tunable_bucket_size`` (their buckets hold no state of
their own across steps; ``bagua_core.lifecycle.capabilities``). The bucket size is tuned when the
impl uses the default ``tensors_to_buckets``; hierarchical is tuned when the impl has a boolean
``hierarchical`` and the job spans several nodes with several ranks on some node.

Example::

    $ BAGUA_AUTOTUNE=1 BAGUA_AUTOTUNE_BUCKET_SIZES=1048576,10485760 bagua train --nproc 2
    >>> model.bagua_autotune_result          # after warmup_steps + candidates * trial_steps steps
    {'bucket_size': 1048576, 'hierarchical': None, 'step_time_s': {...}}
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from typing import Literal

import torch
from pydantic import Field, PositiveInt, ValidationError

from bagua_core.api import AlgorithmImpl, BaguaConfigError, FeatureConfig, ReduceOp, WrappedModule, \
    allreduce_inplace, broadcast, format_validation_error

__all__ = ["AutotuneConfig", "Autotuner"]

logger = logging.getLogger("bagua.autotune")


class AutotuneConfig(FeatureConfig):
    """The options of the feature ``autotune``."""

    name: Literal["autotune"] = "autotune"
    """The feature's name."""
    enabled: bool = True
    """Tune at all (``BAGUA_AUTOTUNE``; False turns the environment's tuning off for a module)."""
    warmup_steps: int = Field(5, ge=1)
    """Train steps before the first trial (``BAGUA_AUTOTUNE_WARMUP_STEPS``)."""
    trial_steps: int = Field(5, ge=2)
    """Train steps per candidate; the first one is not timed (``BAGUA_AUTOTUNE_TRIAL_STEPS``)."""
    bucket_sizes: tuple[PositiveInt, ...] = Field((1 << 20, 4 << 20, 10 << 20, 25 << 20), min_length=1)
    """Candidate bucket sizes in bytes (``BAGUA_AUTOTUNE_BUCKET_SIZES``, comma-separated)."""

    @classmethod
    def from_env(cls) -> AutotuneConfig:
        """The options of ``BAGUA_AUTOTUNE`` and ``BAGUA_AUTOTUNE_*``."""
        options: dict[str, Any] = {"enabled": os.environ.get("BAGUA_AUTOTUNE", "").lower() in ("1", "true", "yes")}
        for name in ("warmup_steps", "trial_steps"):
            raw = os.environ.get(f"BAGUA_AUTOTUNE_{name.upper()}")
            if raw:
                options[name] = raw
        sizes = os.environ.get("BAGUA_AUTOTUNE_BUCKET_SIZES")
        if sizes:
            options["bucket_sizes"] = tuple(s.strip() for s in sizes.split(",") if s.strip())
        try:
            return cls(**options)
        except ValidationError as exc:
            raise BaguaConfigError(format_validation_error(exc, "autotune options (BAGUA_AUTOTUNE_*)")) from None


def _bucket_count(sizes: list[int], bucket_size: int) -> int:
    count, current = 0, 0
    for size in sizes:
        current += size
        if current >= bucket_size:
            count, current = count + 1, 0
    return count + (current > 0)


def _show_on_stderr() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


class Autotuner:
    """Drives the trials of one wrapped module; :meth:`on_step` runs in its forward pre-hook."""

    def __init__(self, module: torch.nn.Module, config: AutotuneConfig) -> None:
        state = WrappedModule(module)
        self.impl: AlgorithmImpl = state.impl
        self.config = config
        self.result: dict[str, Any] | None = None
        self._last: float | None = None
        self._times: dict[int, list[float]] = {}
        self.candidates = self._candidates(module)
        # the step at which trial 0 begins (counted from the step this tuner starts at: a re-wrap, or the
        # algorithm "auto" handing the module to its choice, starts one later in training)
        # (created at wrap with counter 0, or by the forward pre-hook of the step it starts at)
        self._start = max(state.train_step_counter - 1, 0) + config.warmup_steps + 1
        if self.candidates and not logger.hasHandlers() and state.process_group.get_global_communicator().rank() == 0:
            _show_on_stderr()  # the user asked for tuning: show what it does unless logging is configured
        if not self.candidates:
            logger.info("nothing to tune for %s", type(self.impl).__name__)

    def _candidates(self, module: torch.nn.Module) -> list[dict[str, Any]]:
        state = WrappedModule(module)
        impl, group = self.impl, state.process_group
        # an impl that hands the module over to another one while training (``AlgorithmImpl.hands_module_over``:
        # algorithm="auto") is not tuned itself: the tuner of the impl it hands over to tunes that
        if not state.capabilities.tunable_bucket_size or impl.hands_module_over:
            return []
        sizes: list[int | None] = [None]
        if type(impl).tensors_to_buckets is AlgorithmImpl.tensors_to_buckets:
            grads = [p.numel() * p.element_size() for _, p in state.named_parameters()]
            counts: set[int] = set()  # sizes giving the same number of buckets are the same candidate
            sizes = []
            for size in self.config.bucket_sizes:
                if _bucket_count(grads, size) not in counts:
                    counts.add(_bucket_count(grads, size))
                    sizes.append(size)
        hier: list[bool | None] = [None]
        if isinstance(impl.hierarchical, bool) and 1 < group.num_nodes < group.world_size:
            hier = [False, True]
        candidates = [{"bucket_size": s, "hierarchical": h} for s in sizes for h in hier]
        return candidates if len(candidates) > 1 else []

    def _apply(self, candidate: dict[str, Any]) -> bool:
        if candidate["bucket_size"] is not None:
            self.impl.bucket_size = candidate["bucket_size"]
        if candidate["hierarchical"] is not None:
            self.impl.hierarchical = candidate["hierarchical"]
        return True  # the buckets are rebuilt for the candidate

    def on_step(self, module: torch.nn.Module) -> bool:
        """Time the step that ended and start the next trial or decide; True when the module's buckets must be
        rebuilt before this step (a candidate was applied)."""
        now = time.perf_counter()
        step = WrappedModule(module).train_step_counter
        last, self._last = self._last, now
        if self.result is not None or not self.candidates:
            return False
        trials, per_trial = len(self.candidates), self.config.trial_steps
        finished = step - 1  # the step that just ended took now - last
        trial, offset = divmod(finished - self._start, per_trial)
        if last is not None and finished >= self._start and offset > 0 and trial < trials:
            self._times.setdefault(trial, []).append(now - last)
        if step < self._start:
            return False
        trial, offset = divmod(step - self._start, per_trial)
        if trial < trials:
            if offset == 0:
                logger.info("step %d: trial %d/%d %s", step, trial + 1, trials, self.candidates[trial])
                return self._apply(self.candidates[trial])
            return False
        return self._decide(module)

    def _decide(self, module: torch.nn.Module) -> bool:
        state = WrappedModule(module)
        comm = state.process_group.get_global_communicator()
        means = torch.tensor([sum(self._times.get(i, [0.0])) / max(len(self._times.get(i, [])), 1)
                              for i in range(len(self.candidates))], dtype=torch.float64)
        choice = torch.zeros(1, dtype=torch.int64)

        def agree() -> None:
            allreduce_inplace(means, op=ReduceOp.MAX, comm=comm)  # the slowest rank sets the pace
            if comm.rank() == 0:
                choice[0] = int(torch.argmin(means))
            broadcast(choice, src=0, comm=comm)

        worker = state.process_group.worker
        worker.submit(agree)
        worker.synchronize()
        best = self.candidates[int(choice[0])]
        self.result = {**best, "step_time_s": {str(c): float(t) for c, t in zip(self.candidates, means)}}
        logger.info("autotune chose %s (max step time over ranks per candidate: %s); fixed from step %d on",
                    best, [round(float(t), 6) for t in means], state.train_step_counter)
        return self._apply(best)
