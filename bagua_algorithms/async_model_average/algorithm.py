"""``AsyncModelAverageAlgorithm`` and its impl (the package docstring says what is communicated)."""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable

import torch

from bagua_algorithms.async_model_average.averager import AsyncModelAverager
from bagua_algorithms.async_model_average.config import AsyncModelAverageConfig
from bagua_core.api import (
    Algorithm,
    AlgorithmImpl,
    BaguaBucket,
    BaguaCommunicator,
    Capabilities,
    FaultTolerance,
    RoundCount,
    failure_guard,
    first_failure,
    group_tensors,
    samples_in,
    WrappedModule,
    settings,
    tensors,
)

__all__ = ["AsyncModelAverageAlgorithm", "AsyncModelAverageAlgorithmImpl"]

_live_averagers: weakref.WeakSet[AsyncModelAverager] = weakref.WeakSet()


@atexit.register
def _stop_at_exit() -> None:
    for averager in list(_live_averagers):
        averager.stop_locally(timeout=1.0)


class AsyncModelAverageAlgorithmImpl(AlgorithmImpl):
    """The weights in buckets of the background averager, after the core's warmup of gradient allreduce."""

    config: AsyncModelAverageConfig

    def __init__(self, process_group, config: AsyncModelAverageConfig) -> None:
        super().__init__(process_group, config)
        membership = process_group.membership
        self.fault_tolerant = membership.on_quorum
        # the background thread's own torch group (collective: every process); on a quorum (fault-tolerant
        # mode) its group is the only one between replicas: no new group
        group = membership.between_replicas if self.fault_tolerant else process_group.new_channel()
        self.comm = BaguaCommunicator(group, process_group.ranks, f"{process_group.name}/async")
        self.averager: AsyncModelAverager | None = None
        self._averaged_before = (0, 0)  # rounds and bytes of the averagers before this one
        self._warmup_ended = False
        """Set by :meth:`abort` during the warmup: the averaging begins at once (other ranks may have begun)."""
        self._active = True
        self._holds_lock = False

    # --- phases ----------------------------------------------------------------------------------
    def warming_up(self, bagua_module: torch.nn.Module) -> bool:
        """The core's warmup (gradient allreduce) through step ``warmup_steps`` of the module's step counter (the
        wrap's buckets included), unless :meth:`abort` ended it."""
        return not self._warmup_ended and WrappedModule(bagua_module).train_step_counter <= self.config.warmup_steps

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        wrapped = WrappedModule(bagua_module)
        return [tensors.mark(p, n, wrapped.module_name) for n, p in wrapped.build_params()]

    def tensors_to_buckets(self, tensors: list[list[torch.Tensor]], do_flatten: bool) -> list[BaguaBucket]:
        if self.averager is not None:  # its rounds stay counted (rounds_completed)
            self._averaged_before = tuple(a + b for a, b in zip(self._averaged_before, self.averager.averaged))
        self.averager = AsyncModelAverager([], self.comm, self.config.sync_interval_ms, step_bound=self.fault_tolerant,
                                           weighting=self.config.weighting)
        _live_averagers.add(self.averager)
        weights = [t for group in tensors for t in group]
        groups = group_tensors(weights, 2**62)  # one per dtype and device
        return [BaguaBucket(group, f"async_weights_{i}", do_flatten) for i, group in enumerate(groups)]

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        bucket.clear_ops()
        self.averager.add_bucket(bucket)  # averaged in the background: no op runs when the bucket is ready

    # --- the weight lock -----------------------------------------------------------------------
    def _release_lock(self) -> None:
        if self._holds_lock:
            self._holds_lock = False
            self.averager.weight_lock.release()

    def init_forward_pre_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook(inputs) -> None:
            if not self._holds_lock:
                self.averager.weight_lock.acquire()
                self._holds_lock = True
            self.averager.apply_pending()
            if self.config.weighting == "samples" and torch.is_grad_enabled():
                self.averager.add_samples(samples_in(inputs))
            if self._active and not self.averager.running:
                self.averager.raise_if_failed()
                self.averager.start()

        return hook

    def init_backward_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook(parameter_name: str, parameter: torch.nn.Parameter) -> None:
            return None  # the weights' buckets are the averager's: nothing is marked ready

        return hook

    def init_post_backward_hook(self, bagua_module: torch.nn.Module) -> Callable:
        wrapped = WrappedModule(bagua_module)

        def hook() -> None:
            if not wrapped.optimizers:
                self._release_lock()

        return hook

    def init_step_end_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook() -> None:  # every optimizer has stepped: the weights are the background's again
            self._release_lock()

        return hook

    # --- control -------------------------------------------------------------------------------
    def abort(self, bagua_module: torch.nn.Module) -> None:
        """Stop the averaging; returns once every rank has aborted (collective). A no-op if stopped.
        ``bagua_module``: the wrapped module, or a ``data_parallel.DistributedDataParallel`` of it."""
        bagua_module = getattr(bagua_module, "inner", bagua_module)
        if not self._active:
            return
        with failure_guard("aborting asynchronous model averaging"):
            if self.warming_up(bagua_module):  # still in warmup here, but other ranks may be averaging already
                self._warmup_ended = True
                WrappedModule(bagua_module).reset()
            self._release_lock()
            self._active = False
            self.averager.abort(timeout=settings.comm_timeout_s())

    def resume(self, bagua_module: torch.nn.Module) -> None:
        """Restart the averaging stopped by :meth:`abort` (every rank must resume). ``bagua_module``: the
        wrapped module or its ``data_parallel.DistributedDataParallel``."""
        if self._active:
            return
        self._active = True
        if not self.warming_up(getattr(bagua_module, "inner", bagua_module)):
            self.averager.start()

    def quiesce(self, bagua_module: torch.nn.Module) -> None:
        """Fault-tolerant mode: end this step's rounds (``AsyncModelAverager.stop_for_step``); the next forward
        starts them again. Raises the error of a failed round (nothing of it was applied)."""
        if self.fault_tolerant and self.averager is not None:
            self._release_lock()
            self.averager.stop_for_step(timeout=settings.comm_timeout_s())

    def rounds_completed(self) -> RoundCount | None:
        """The background averaging rounds (each allreduces every bucket's fp32 weights); None during warmup,
        whose steps allreduce gradients and are rounds each."""
        if self.averager is None:
            return None
        rounds, dense_bytes = (a + b for a, b in zip(self._averaged_before, self.averager.averaged))
        return RoundCount(rounds, dense_bytes)

    def shutdown(self, bagua_module: torch.nn.Module) -> None:
        """Stop the loop (collectively: every rank re-wraps or shuts down the module; in fault-tolerant mode
        the loop was stopped at the end of the last step, and a quorum's group is not agreed on again)."""
        if self.averager is not None and self.averager.running:
            if first_failure() is not None or self.fault_tolerant:  # the others will not agree to stop
                self.averager.stop_locally(timeout=1.0)
            else:
                self.abort(bagua_module)
        if self.averager is not None:
            self._release_lock()


class AsyncModelAverageAlgorithm(Algorithm):
    """Asynchronous model averaging: weights averaged by a background thread while training runs."""

    name = "async"
    Config = AsyncModelAverageConfig
    Impl = AsyncModelAverageAlgorithmImpl
    capabilities = Capabilities(communicates="weights", background_work=True, weights_differ_across_ranks=True,
                                supports_sharding=True,
                                exact_resume=False, relative_bytes=None,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "step"), commit="after_step",
                                    rederives=("averaging denominator", "the group of the averaging rounds")))
    """Rounds of weight averaging every ``sync_interval_ms``: the bytes per step depend on timing."""
