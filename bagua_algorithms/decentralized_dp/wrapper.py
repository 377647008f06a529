"""``DecentralizedDataParallel``: the decent-dp wrapper (optimizer fused into backward, gossip over edges).

Communicated: each bucket's parameters, in their own dtype, with an asynchronous ``all_reduce(SUM)``
over the current step's edge of the topology, mixed in as ``x <- w*x + (1-w)/(|R|-1) * (sum - x)``
when the bucket steps in the next backward; :meth:`global_avg` averages everything over all ranks.

The wrapped model runs on bagua's lifecycle, as ``with_bagua(..., "decentralized_dp")`` does: the
wrapper wraps it with the same implementation, given the wrapper's ``optim_fn``, ``lr_scheduler_fn``,
topology and scaler (the core's buckets, its bucket ready hook stepping each bucket's optimizer inside
backward). It needs ``bagua.init_process_group()`` (called here when only torch.distributed is).

Example::

    >>> model = DecentralizedDataParallel(
    ...     net, lambda named: torch.optim.AdamW([p for _, p in named], lr=1e-3), topology="ring")
    >>> for x, y in data:
    ...     F.cross_entropy(model(x), y).backward()     # buckets step and communicate here
    >>> model.global_avg()                              # exact average before evaluation
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from bagua_algorithms.decentralized_dp.engine import (
    DecentralizedEngine,
    OptimFn,
    SchedulerFn,
    validate_engine_options,
)
from bagua_algorithms.decentralized_dp.topology import Topology, get_topology
from bagua_algorithms.decentralized_dp.algorithm import DecentralizedDPAlgorithm, DecentralizedDPAlgorithmImpl
from bagua_algorithms.decentralized_dp.config import DecentralizedDPConfig
from bagua_core.api import (
    BaguaProcessGroup,
    WrappedModule,
    agreement,
    init_process_group,
    record_payload,
    settings,
)

__all__ = ["DecentralizedDataParallel"]


class DecentralizedDataParallel(torch.nn.Module):
    """Wrap ``model`` for decentralized training. Construction is collective: the options, the resolved
    topology and the model's tensors are compared across ranks first, and a difference raises on every
    rank (naming the option and each rank's value) before anything is communicated.

    ``optim_fn`` takes a list of ``(name, parameter)`` pairs (one bucket) and returns its optimizer;
    ``lr_scheduler_fn`` takes that optimizer and returns its scheduler (stepped with it). ``topology``
    is a registered name or a :class:`Topology`. ``scaler``: a ``torch.amp.GradScaler`` (call
    ``scaler.scale(loss).backward()``; the engine unscales, steps and updates it). ``grad_clip_norm``
    > 0 clips each bucket's gradients to that norm. Parameters and buffers are broadcast from rank 0.
    """

    def __init__(self, model: torch.nn.Module, optim_fn: OptimFn, lr_scheduler_fn: SchedulerFn | None = None,
                 topology: str | Topology = "complete", scaler: Any = None, grad_clip_norm: float = 0.0,
                 param_as_bucket_view: bool = True, sync_buffer_in_global_avg: bool = False,
                 bucket_size_in_mb: float = 25.0, local_world_size: int | None = None) -> None:
        super().__init__()

        def prepare() -> agreement.Prepared:  # every rank checks the others' options before any collective
            validate_engine_options(grad_clip_norm, bucket_size_in_mb)
            built = topology
            if isinstance(built, str):
                local = settings.local_size() if local_world_size is None else local_world_size
                built = get_topology(built, dist.get_world_size(), local)
            return agreement.Prepared(built, {
                "entry point": "DecentralizedDataParallel", "topology": built.name,
                "topology local_world_size": built.local_world_size, "grad_clip_norm": float(grad_clip_norm),
                "param_as_bucket_view": bool(param_as_bucket_view), "bucket_size_in_mb": float(bucket_size_in_mb),
                "sync_buffer_in_global_avg": bool(sync_buffer_in_global_avg),
                "lr_scheduler_fn": lr_scheduler_fn is not None, "scaler": type(scaler).__name__ if scaler else None,
            })

        named_tensors = list(model.named_parameters()) + list(model.named_buffers())
        signature = agreement.model_signature(named_tensors)
        topology = agreement.agree_or_raise(None, prepare, signature, what="DecentralizedDataParallel")
        self.module = model
        self.sync_buffer_in_global_avg = sync_buffer_in_global_avg
        with torch.no_grad():  # every tensor, frozen parameters included (with_bagua then has nothing to change)
            for tensor in list(model.parameters()) + list(model.buffers()):
                flat = tensor.data.reshape(-1).clone()
                record_payload("broadcast", flat.numel() * flat.element_size())
                dist.broadcast(flat, src=0)
                tensor.data.copy_(flat.view(tensor.shape))
        if BaguaProcessGroup.default_or_none() is None:
            init_process_group()
        declaration = _WrapperAlgorithm(topology, optim_fn, lr_scheduler_fn, scaler, grad_clip_norm,
                                        param_as_bucket_view, bucket_size_in_mb, sync_buffer_in_global_avg)
        model.with_bagua([], declaration)
        self.engine: DecentralizedEngine = WrappedModule(model).impl.engine

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        return self.module.parameters(recurse)

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return self.module.named_parameters(prefix, recurse, remove_duplicate)

    def set_accumulate_grad(self, enable: bool = True) -> None:
        """While enabled, backward only accumulates gradients (no step, no communication, no step count)."""
        WrappedModule(self.module).set_gradient_sync(not enable)  # the core's no_sync: the backward hooks do nothing

    def global_avg(self, will_revert: bool = True, return_d2c: bool = False) -> float | None:
        """Average the parameters over all ranks exactly (and the buffers when
        ``sync_buffer_in_global_avg``), in place. Collective. ``will_revert``: keep a copy for
        :meth:`revert_global_avg` and keep the communication in flight (training then continues as if
        nothing happened after a revert); else it is dropped. ``return_d2c``: return this rank's
        distance to the average. As decent-dp 0.2.3.

        Example::

            >>> model.global_avg(); evaluate(model); model.revert_global_avg()
        """
        buffers = list(self.module.buffers()) if self.sync_buffer_in_global_avg else ()
        return self.engine.global_avg(buffers, will_revert, return_d2c)

    def revert_global_avg(self) -> None:
        """Put back the parameters saved by the last ``global_avg(will_revert=True)``."""
        self.engine.revert_global_avg()

    def get_lr(self) -> float:
        """The current learning rate of the first bucket's scheduler (0.0 before the first backward)."""
        return self.engine.get_lr()

    def set_adaptive_factor(self, factor: float) -> None:
        """Mix with ``x <- (1 - factor) x + factor mix(x)`` from now on (decent-dp's adaptive factor)."""
        self.engine.adaptive_factor = float(factor)

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The per-bucket optimizers (empty before the first backward)."""
        return [b.optimizer for b in self.engine.buckets or ()]

    @property
    def lr_schedulers(self) -> list[Any]:
        return [b.scheduler for b in self.engine.buckets or ()]

    def bagua_checkpoint_state(self) -> dict[str, Any]:
        """What ``bagua_features.checkpoints.checkpoint.save_checkpoint`` keeps beyond the parameters: the engine's step and
        per-bucket optimizer and LR scheduler states (the rounds in flight are mixed in first). Every
        rank keeps its own (the ranks' parameters differ)."""
        return {"algorithm": type(self).__name__, "per_rank": True, "exact": True, "train_step_counter": self.engine.step,
                "state": self.engine.state_dict()}

    def bagua_load_checkpoint_state(self, iteration: int, saved: dict[str, Any]) -> None:
        """Restore :meth:`bagua_checkpoint_state` (``load_checkpoint`` calls it)."""
        self.engine.load_state_dict(saved["state"])

    def remove_hooks(self) -> None:
        """Wait for the rounds in flight and remove bagua's hooks (the model trains plainly again)."""
        self.engine.wait()
        if WrappedModule.is_wrapped(self.module):
            WrappedModule(self.module).shutdown()


class _WrapperAlgorithm(DecentralizedDPAlgorithm):
    """The wrapper's options as the algorithm ``with_bagua`` reifies: objects (the built topology, the
    optimizer and scheduler functions, the scaler), agreed across ranks by the wrapper beforehand."""

    def __init__(self, topology: Topology, optim_fn: OptimFn, lr_scheduler_fn: SchedulerFn | None, scaler: Any,
                 grad_clip_norm: float, param_as_bucket_view: bool, bucket_size_in_mb: float,
                 sync_buffer_in_global_avg: bool) -> None:
        # validated by the wrapper (validate_engine_options, the topology built); a topology instance
        # need not be registered, so the config is built without the registry check
        self.config = DecentralizedDPConfig.model_construct(
            name=self.name, topology=topology.name, bucket_size_in_mb=float(bucket_size_in_mb),
            grad_clip_norm=float(grad_clip_norm), sync_buffer_in_global_avg=bool(sync_buffer_in_global_avg))
        self.optimizers, self.scaler = [], scaler
        self.built = (topology, optim_fn, lr_scheduler_fn, bool(param_as_bucket_view))

    def reify(self, process_group: Any) -> DecentralizedDPAlgorithmImpl:
        topology, optim_fn, lr_scheduler_fn, as_view = self.built
        return DecentralizedDPAlgorithmImpl(process_group, self.config, topology, (), self.scaler, optim_fn=optim_fn,
                                            lr_scheduler_fn=lr_scheduler_fn, param_as_bucket_view=as_view,
                                            update_scaler=True)
