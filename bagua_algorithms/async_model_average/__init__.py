"""``async``: asynchronous model averaging by a background thread, no waiting in the training loop.

During the first ``warmup_steps`` steps: plain gradient allreduce (AVG, full precision). After it, a
background thread every ``sync_interval_ms`` snapshots the weights, allreduces the snapshot (SUM, in
the weights' dtype, on a torch process group of its own) and under the weight lock applies
``x += reduced / n - snapshot``, keeping the local progress made since the snapshot
(:mod:`bagua_algorithms.async_model_average.averager`, registered for
``BaguaBucket.append_asynchronous_model_average_op``). The training thread holds the weight lock from the
forward pre-hook until its optimizers have stepped (until the end of backward when it has none), so
an averaging update never interleaves with an optimizer update; an update that finished meanwhile is
applied at the next forward.

``module.bagua_algorithm.abort(module)`` stops the averaging; it returns once every rank has
called it (ranks may run different numbers of steps: a rank that aborted keeps joining the rounds
until all have). ``resume(module)`` restarts it. Call ``abort`` on every rank before the process
group is destroyed; the thread is a daemon, and an ``atexit`` handler stops it locally, so it never
blocks interpreter exit.

Fault-tolerant mode (``Capabilities.fault_tolerance``): the rounds run on the quorum's managed group, only
inside a training step of every replica: at the end of each step the runtime stops them
(``quiesce``: the next round's stop flag ends every replica's loop, with no averaging in that round) before
the step's commit decision and before the next quorum may reconfigure the group, and the next forward starts
them again, ``sync_interval_ms`` after the last round. A round whose collectives failed (a replica killed or
hung in it) is dropped before anything of it is applied and fails the step; the failed step is then committed
nowhere: every survivor restores the weights, optimizer state and step counter it had when the step began,
so the rounds applied during that step are undone with it. A joiner heals weights, optimizer state and step
from a live peer (the phase, warmup or averaging, follows from the step) and the next quorum's rounds divide
by its replicas. ``abort``/``resume`` are not for that mode (the runtime starts and stops the rounds).

Example::

    >>> model = model.with_bagua([optimizer], AsyncModelAverageAlgorithm(sync_interval_ms=100))
    >>> for x, y in loader: ...                   # train as usual, any number of steps per rank
    >>> model.bagua_algorithm.abort(model)        # all ranks end with the same averaged weights
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable
from typing import Literal

import torch
from pydantic import field_validator

from bagua_algorithms.async_model_average.averager import AsyncModelAverager, new_async_communicator
from bagua_core.runtime import env, failure
from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig, AlgorithmImpl, split_into_buckets
from bagua_core.lifecycle.capabilities import Capabilities
from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.fault_tolerance.quorum_group import QuorumGroup
from bagua_core.lifecycle.capabilities import FaultTolerance
from bagua_core.plugins import hookimpl
from bagua_core.runtime.communication.communicator import BaguaCommunicator

__all__ = ["AsyncModelAverageAlgorithm", "AsyncModelAverageAlgorithmImpl", "AsyncModelAverageConfig"]

_live_averagers: weakref.WeakSet[AsyncModelAverager] = weakref.WeakSet()


@atexit.register
def _stop_at_exit() -> None:
    for averager in list(_live_averagers):
        averager.stop_locally(timeout=1.0)


class AsyncModelAverageConfig(AlgorithmConfig):
    name: Literal["async"] = "async"
    peer_selection_mode: Literal["all"] = "all"
    """Which ranks average together each round: "all" (every rank)."""
    sync_interval_ms: int = 500
    """Milliseconds between the starts of two averaging rounds (a positive integer)."""
    warmup_steps: int = 0
    """Steps of plain gradient allreduce before the asynchronous averaging starts."""

    @field_validator("sync_interval_ms", "warmup_steps", mode="before")
    @classmethod
    def _check_ints(cls, value: object, info) -> int:
        minimum = 1 if info.field_name == "sync_interval_ms" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            what = "a positive integer" if minimum else "a non-negative integer"
            raise ValueError(f"{info.field_name} must be {what}, got {value!r}")
        return value


class AsyncModelAverageAlgorithmImpl(AlgorithmImpl):
    def __init__(
        self, process_group, peer_selection_mode: str = "all", sync_interval_ms: int = 500, warmup_steps: int = 0
    ) -> None:
        if peer_selection_mode != "all":
            raise ValueError(f"peer_selection_mode must be 'all', got {peer_selection_mode!r}")
        super().__init__(process_group)
        self.peer_selection_mode = peer_selection_mode
        self.sync_interval_ms = sync_interval_ms
        self.warmup_steps = warmup_steps
        self.fault_tolerant = isinstance(process_group, QuorumGroup)
        # fault-tolerant mode: the quorum's managed group is the only one between replicas (no new group)
        self.comm = BaguaCommunicator(process_group.managed, process_group.ranks, f"{process_group.name}/async") \
            if self.fault_tolerant else new_async_communicator(process_group.ranks)  # collective: every process
        self.averager: AsyncModelAverager | None = None
        self._module: torch.nn.Module | None = None
        self._async_phase: bool | None = None
        self._forced_async = False
        self._active = True
        self._holds_lock = False
        self._stepped = 0

    # --- phases ----------------------------------------------------------------------------------
    def _wants_async(self) -> bool:
        return self._forced_async or self._module.bagua_train_step_counter > self.warmup_steps

    def need_reset(self) -> bool:
        return self._wants_async() != self._async_phase

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        self._module = bagua_module
        self._async_phase = self._wants_async()
        if not self._async_phase:
            return super().init_tensors(bagua_module)
        return [p.ensure_bagua_tensor(n, bagua_module.bagua_module_name) for n, p in bagua_module.bagua_build_params()]

    def tensors_to_buckets(self, tensors: list[list[torch.Tensor]], do_flatten: bool) -> list[BaguaBucket]:
        if not self._async_phase:
            return super().tensors_to_buckets(tensors, do_flatten)
        self.averager = AsyncModelAverager([], self.comm, self.sync_interval_ms, step_bound=self.fault_tolerant)
        _live_averagers.add(self.averager)
        weights = [t for group in tensors for t in group]
        return split_into_buckets(weights, 2**62, do_flatten, name_prefix="async_weights")  # one per dtype

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        bucket.clear_ops()
        if self._async_phase:
            bucket._async_op = bucket.append_asynchronous_model_average_op(
                self.peer_selection_mode, self.process_group, averager=self.averager
            )
        else:
            bucket.append_centralized_synchronous_op(hierarchical=False, average=True, group=self.process_group)

    # --- the weight lock -----------------------------------------------------------------------
    def _release_lock(self) -> None:
        if self._holds_lock:
            self._holds_lock = False
            self.averager.weight_lock.release()

    def init_forward_pre_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook(inputs) -> None:
            self._stepped = 0
            if not self._async_phase:
                return
            if not self._holds_lock:
                self.averager.weight_lock.acquire()
                self._holds_lock = True
            self.averager.apply_pending()
            if self._active and not self.averager.running:
                self.averager.raise_if_failed()
                self.averager.start()

        return hook

    def init_backward_hook(self, bagua_module: torch.nn.Module) -> Callable:
        default = super().init_backward_hook(bagua_module)

        def hook(parameter_name: str, parameter: torch.nn.Parameter) -> None:
            if not self._async_phase:
                default(parameter_name, parameter)

        return hook

    def init_post_backward_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook() -> None:
            if not self._async_phase:
                bagua_module.bagua_wait_for_communication()
            elif not bagua_module.bagua_optimizers:
                self._release_lock()

        return hook

    def init_post_optimizer_step_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook(optimizer: torch.optim.Optimizer) -> None:
            self._stepped += 1
            if self._async_phase and self._stepped >= len(bagua_module.bagua_optimizers):
                self._release_lock()

        return hook

    # --- control -------------------------------------------------------------------------------
    def abort(self, bagua_module: torch.nn.Module) -> None:
        """Stop the averaging; returns once every rank has aborted (collective). A no-op if stopped.
        ``bagua_module``: the wrapped module, or a ``data_parallel.DistributedDataParallel`` of it."""
        bagua_module = getattr(bagua_module, "inner", bagua_module)
        if not self._active:
            return
        with failure.guard("aborting asynchronous model averaging"):
            if not self._async_phase:  # still in warmup here, but other ranks may be averaging already
                self._forced_async = True
                bagua_module.bagua_reset()
            self._release_lock()
            self._active = False
            self.averager.abort(timeout=env.get_comm_timeout_s())

    def resume(self, bagua_module: torch.nn.Module) -> None:
        """Restart the averaging stopped by :meth:`abort` (every rank must resume). ``bagua_module``: the
        wrapped module or its ``data_parallel.DistributedDataParallel``."""
        if self._active:
            return
        self._active = True
        if self._async_phase:
            self.averager.start()

    def quiesce(self, bagua_module: torch.nn.Module) -> None:
        """Fault-tolerant mode: end this step's rounds (``AsyncModelAverager.stop_for_step``); the next forward
        starts them again. Raises the error of a failed round (nothing of it was applied)."""
        if self.fault_tolerant and self.averager is not None:
            self._release_lock()
            self.averager.stop_for_step(timeout=env.get_comm_timeout_s())

    def shutdown(self, bagua_module: torch.nn.Module) -> None:
        """Stop the loop (collectively: every rank re-wraps or shuts down the module; in fault-tolerant mode
        the loop was stopped at the end of the last step, and a quorum's group is not agreed on again)."""
        if self.averager is not None and self.averager.running:
            if failure.first_failure() is not None or self.fault_tolerant:  # the others will not agree to stop
                self.averager.stop_locally(timeout=1.0)
            else:
                self.abort(bagua_module)
        if self.averager is not None:
            self._release_lock()


class AsyncModelAverageAlgorithm(Algorithm):
    """Asynchronous model averaging: weights averaged by a background thread while training runs."""

    name = "async"
    Config = AsyncModelAverageConfig
    capabilities = Capabilities(communicates="weights", background_work=True, weights_differ_across_ranks=True,
                                exact_resume=False, relative_bytes=None,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "step"), commit="after_step",
                                    rederives=("averaging denominator", "the group of the averaging rounds")))
    """Rounds of weight averaging every ``sync_interval_ms``: the bytes per step depend on timing."""

    def __init__(self, peer_selection_mode: str = "all", sync_interval_ms: int = 500, warmup_steps: int = 0) -> None:
        super().__init__(peer_selection_mode=peer_selection_mode, sync_interval_ms=sync_interval_ms, warmup_steps=warmup_steps)

    def reify(self, process_group) -> AsyncModelAverageAlgorithmImpl:
        c = self.config
        return AsyncModelAverageAlgorithmImpl(process_group, c.peer_selection_mode, c.sync_interval_ms, c.warmup_steps)


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [AsyncModelAverageAlgorithm]


@hookimpl
def bagua_register_bucket_ops() -> list[type]:
    return [AsyncModelAverager]
