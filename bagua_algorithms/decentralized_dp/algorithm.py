"""``decentralized_dp`` for ``with_bagua``: the decent-dp engine behind the user's plain training loop.

The per-bucket optimizers are built like the optimizer passed to ``with_bagua`` (its class, its
defaults and each parameter's group options; see :func:`optim_fn_like`) and step inside backward.
The user's ``optimizer.step()`` is therefore replaced, on that optimizer instance only, by a no-op
that still runs the optimizer's step pre/post hooks (``Optimizer.profile_hook_step``), so it never
applies a second update; ``model.bagua_shutdown()`` or re-wrapping restores it. Communicated: as
:class:`DecentralizedDataParallel` (each bucket's parameters, in their dtype, async SUM over the
step's edge). ``model.no_sync()`` accumulates gradients without stepping.

Fault-tolerant mode: reified on each quorum's group, the topology is built for the quorum's size
(``Topology.any_world_size``), the edges sum on the quorum's group and each step's rounds are mixed in
before the step ends; the engine's state (topology step, bucket optimizers) is healed and restored.

Mixed precision: pass the ``torch.amp.GradScaler`` to the algorithm
(``DecentralizedDPAlgorithm(..., scaler=scaler)``) and keep the usual loop
(``scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()``): each bucket's optimizer is
unscaled, checked and stepped (or skipped) through the scaler inside backward, the user's optimizer is
marked as handling its own scaling (``_step_supports_amp_scaling``) so ``scaler.step`` leaves it to
the no-op, and ``scaler.update()`` lowers the scale after an overflow in any bucket. A skipped bucket
stays local (weights, not gradients, are communicated).

Example::

    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> model = model.with_bagua([optimizer], {"name": "decentralized_dp", "topology": "ring"})
    >>> optimizer.zero_grad(); loss_fn(model(x), y).backward(); optimizer.step()
    >>> model.bagua_algorithm.global_avg(model)       # exact average before evaluation
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from bagua_algorithms.decentralized_dp.buckets import ParamBucket
from bagua_algorithms.decentralized_dp.config import DecentralizedDPConfig
from bagua_algorithms.decentralized_dp.engine import DecentralizedEngine, OptimFn, SchedulerFn
from bagua_algorithms.decentralized_dp.optim_fns import optim_fn_like
from bagua_algorithms.decentralized_dp.topology import Topology, get_topology
from bagua_core.api import (
    Algorithm,
    AlgorithmConfig,
    AlgorithmImpl,
    BaguaBucket,
    BaguaConfigError,
    BaguaError,
    Capabilities,
    FaultTolerance,
    WrappedModule,
    first_failure,
    tensors,
)

__all__ = ["DecentralizedDPAlgorithm", "DecentralizedDPAlgorithmImpl"]


def _noop_step(self: torch.optim.Optimizer, closure: Any = None) -> None:
    if closure is not None:
        raise BaguaError("decentralized_dp steps the optimizer inside backward; step(closure) is not supported")


_hooked_noop_step = torch.optim.Optimizer.profile_hook_step(_noop_step)  # still runs the step hooks


class DecentralizedDPAlgorithmImpl(AlgorithmImpl):
    """decent-dp on the core's lifecycle: the core's buckets hold the parameters (the weights are what is
    communicated), in the order their gradients became ready in the first backward (agreed across
    ranks); the core marks a bucket ready when its last gradient is accumulated and calls the bucket
    ready hook in bucket order on the training thread, where the engine mixes the bucket's last round in,
    steps the bucket's optimizer and starts the next round. The first backward only traces the order:
    its end builds the buckets (``WrappedModule.reset``) and steps them all."""

    def __init__(self, process_group: Any, config: DecentralizedDPConfig, topology: Topology,
                 optimizers: Sequence[torch.optim.Optimizer], scaler: Any = None, *,
                 optim_fn: OptimFn | None = None, lr_scheduler_fn: SchedulerFn | None = None,
                 param_as_bucket_view: bool = True, update_scaler: bool = False) -> None:
        super().__init__(process_group, config)
        self.topology, self.optimizers = topology, list(optimizers)
        # the wrapper's form: its optim_fn builds the bucket optimizers (else: like the user's optimizer,
        # whose step is silenced), and the engine updates the scaler itself
        self.optim_fn, self.lr_scheduler_fn = optim_fn, lr_scheduler_fn
        self.as_view, self.update_scaler = param_as_bucket_view, update_scaler
        self.engine: DecentralizedEngine | None = None
        self._silenced: torch.optim.Optimizer | None = None
        self.scaler = scaler
        self._order: list[str] | None = None  # agreed at the end of the first backward
        self._param_buckets: dict[int, ParamBucket] = {}  # id(core bucket) -> the engine's bucket

    def _user_optimizer(self, module: torch.nn.Module) -> torch.optim.Optimizer:
        wrapped = WrappedModule(module)
        optimizers = self.optimizers or list(wrapped.optimizers)
        if len(optimizers) != 1:
            raise BaguaConfigError(f"decentralized_dp needs exactly one optimizer in with_bagua, got {len(optimizers)}")
        optimizer = optimizers[0]
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        trained = {id(p) for _, p in wrapped.named_parameters()}
        if held != trained:
            raise BaguaConfigError(
                "decentralized_dp steps every parameter inside backward, so the optimizer must hold exactly the "
                f"module's trainable parameters ({len(trained)}), got {len(held)} of which "
                f"{len(held - trained)} are not the module's"
            )
        return optimizer

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        wrapped = WrappedModule(bagua_module)
        quorum = self.process_group.get_global_communicator() if self.process_group.membership.on_quorum else None
        if self.engine is None and self.optim_fn is not None:
            self.engine = DecentralizedEngine(
                wrapped.named_parameters(), self.optim_fn, self.topology, self.lr_scheduler_fn,
                self.scaler, self.config.grad_clip_norm, self.as_view, self.config.bucket_size_in_mb,
                update_scaler=self.update_scaler, quorum=quorum,
            )
        if self.engine is None:
            optimizer = self._user_optimizer(bagua_module)
            self.engine = DecentralizedEngine(
                wrapped.named_parameters(), optim_fn_like(optimizer), self.topology,
                grad_clip_norm=self.config.grad_clip_norm, bucket_size_in_mb=self.config.bucket_size_in_mb,
                scaler=self.scaler, update_scaler=False, quorum=quorum,
            )
            optimizer.step = types.MethodType(_hooked_noop_step, optimizer)
            if self.scaler is not None:
                optimizer._step_supports_amp_scaling = True  # scaler.step calls the no-op, unscales nothing
            self._silenced = optimizer
        if self._order is None:
            return []  # the first backward traces the order; no buckets until it ends
        module_name = wrapped.module_name
        return [tensors.mark(param, name, module_name) for name, param in self.engine.ordered_params(self._order)]

    def bucket_size_bytes(self) -> int:
        return self.engine.bucket_bytes if self.engine is not None else super().bucket_size_bytes()

    def tensors_to_buckets(self, marked: list[list[torch.Tensor]], do_flatten: bool) -> list[BaguaBucket]:
        """The core's groups (``bucket_size_in_mb``, in the agreed order); each bucket's parameters become
        views of one buffer of the engine's bucket (in their own memory layout), so the core bucket
        does not flatten them again."""
        assert self.engine is not None
        if not marked:  # before the first backward ended
            return []
        groups = [[(tensors.name_of(tensor), tensor) for tensor in group] for group in marked]
        if self.engine.buckets is None:
            self.engine.use_buckets([ParamBucket(group, as_view=self.as_view) for group in groups])
        elif [b.names for b in self.engine.buckets] != [[n for n, _ in group] for group in groups]:
            raise BaguaError("decentralized_dp's buckets cannot change once built (they hold the optimizers)")
        buckets = [BaguaBucket(group, f"bucket_{i}", flatten=False) for i, group in enumerate(marked)]
        self._param_buckets = {id(core): own for core, own in zip(buckets, self.engine.buckets)}
        return buckets

    def init_backward_hook(self, bagua_module: torch.nn.Module) -> Callable[[str, torch.nn.Parameter], None]:
        engine = self.engine
        assert engine is not None

        def hook(name: str, param: torch.nn.Parameter) -> None:
            if engine.note_gradient(param):  # False in the first backward: it traces the order
                tensors.mark_ready(param)

        return hook

    def init_bucket_ready_hook(self, bagua_module: torch.nn.Module) -> Callable[[BaguaBucket], None]:
        engine, own = self.engine, self._param_buckets
        assert engine is not None
        return lambda bucket: engine.step_bucket(own[id(bucket)])

    def init_post_backward_hook(self, bagua_module: torch.nn.Module) -> Callable[[], None]:
        engine = self.engine
        assert engine is not None
        wrapped = WrappedModule(bagua_module)

        def hook() -> None:
            engine.end_backward_pass()
            if self._order is None:  # the first backward: agree on the order, build the buckets
                self._order = engine.agreed_order()
                wrapped.reset()
            wrapped.wait_for_communication()  # the buckets not stepped yet step now, in order
            engine.end_step()

        return hook

    def global_avg(self, bagua_module: torch.nn.Module, will_revert: bool = True, return_d2c: bool = False):
        """Average parameters (and buffers if asked) over all ranks exactly (see the wrapper's)."""
        assert self.engine is not None
        wrapped = WrappedModule(bagua_module)
        buffers = [b for _, b in wrapped.named_buffers()] if self.config.sync_buffer_in_global_avg else []
        return self.engine.global_avg(buffers, will_revert, return_d2c)

    def revert_global_avg(self, bagua_module: torch.nn.Module) -> None:
        assert self.engine is not None
        self.engine.revert_global_avg()

    def state_dict(self) -> dict[str, Any]:
        """The engine's: the topology step and the per-bucket optimizers (rounds in flight are mixed in)."""
        return self.engine.state_dict() if self.engine is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            assert self.engine is not None
            self.engine.load_state_dict(state)

    def shutdown(self, bagua_module: torch.nn.Module) -> None:
        if self.engine is not None and first_failure() is None:  # after a failure nothing completes
            self.engine.wait()
        if self._silenced is not None:
            for attribute in ("step", "_step_supports_amp_scaling"):
                self._silenced.__dict__.pop(attribute, None)
        self._silenced = None


class DecentralizedDPAlgorithm(Algorithm):
    """Decentralized data parallel (decent-dp): optimizer fused into backward, gossip over a topology."""

    name = "decentralized_dp"
    Config = DecentralizedDPConfig
    Impl = DecentralizedDPAlgorithmImpl
    capabilities = Capabilities(communicates="weights", steps_optimizer_in_backward=True,
                                weights_differ_across_ranks=True, relative_bytes=None,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "algorithm_state", "step"), commit="after_step",
                                    rederives=("topology edges (from the quorum's size: ranks and replicas)",
                                               "the order of the buckets (agreed again on each quorum)",
                                               "mixing weights of each edge")))
    """Gossip of weights over the topology: the bytes per step depend on it. In fault-tolerant mode the
    topology is built for each quorum's size (``Topology.any_world_size``), the algorithm state (the
    topology step and every bucket's optimizer and scheduler) is healed and restored with the step, and
    each step's rounds are mixed in before it ends (no overlap with the next step)."""

    def __init__(self, *, optimizers: Sequence[torch.optim.Optimizer] = (), scaler: Any = None, **options: Any) -> None:
        """``options``: those of ``DecentralizedDPConfig``; ``optimizers``: those given to ``with_bagua``
        (the bucket optimizers are built like the one of them); ``scaler``: see below."""
        super().__init__(**options)
        self.optimizers = list(optimizers)
        self.scaler = scaler
        """A ``torch.amp.GradScaler`` for mixed precision (not part of the config: an object)."""

    @classmethod
    def from_config(cls, config: AlgorithmConfig, optimizers: Sequence[torch.optim.Optimizer] = ()) -> Algorithm:
        return cls(**config.model_dump(exclude={"name"}), optimizers=optimizers)

    def reify(self, process_group: Any) -> DecentralizedDPAlgorithmImpl:
        membership = process_group.membership  # fault-tolerant mode: the topology is derived from the quorum's size
        if process_group.world_size != dist.get_world_size() and not membership.on_quorum:
            raise BaguaConfigError("decentralized_dp runs on the whole job's process group, not a subgroup")
        topology = get_topology(self.config.topology, process_group.world_size, process_group.local_size,
                                any_size=membership.changes)
        return DecentralizedDPAlgorithmImpl(process_group, self.config, topology, self.optimizers, self.scaler)
