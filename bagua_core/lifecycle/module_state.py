"""``ModuleState``: everything bagua keeps on a wrapped module, in one object at the module's one bagua
attribute (``bagua_core.lifecycle.state``), written by the core only.

``with_bagua`` creates it (a re-wrap creates a new one, keeping the module's name, ``find_unused_parameters`` and
the features running), the hooks read it through :func:`state_of`, ``bagua_shutdown()`` removes it; the wrapped
module's documented attributes are read-only properties over it, and the impl running the module changes through
one call, ``bagua_core.lifecycle.algorithm.switch_algorithm``.

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce")
    >>> state_of(model).declaration.name
    'gradient_allreduce'
    >>> model.bagua_shutdown(); state_of(model) is None
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.lifecycle.capabilities import Capabilities
from bagua_core.lifecycle.scheduler import BucketScheduler
from bagua_core.lifecycle.shard_layout import ShardLayout
from bagua_core.lifecycle.state import get_state

__all__ = ["ImplHooks", "Lending", "ModuleState", "UnusedParameters", "build_params", "module_name", "named_buffers", "named_parameters",
           "params_and_buffers_to_ignore", "shard_group", "state_of", "wait_for_communication"]


@dataclass(slots=True)
class ImplHooks:
    """The callables the impl's ``init_*_hook`` methods returned (made again with the buckets)."""

    bucket_ready: Callable[[BaguaBucket], None] | None
    backward: Callable[[str, torch.nn.Parameter], None]
    post_backward: Callable[[], None]
    forward_pre: Callable[[Any], None]
    post_optimizer_step: Callable[[torch.optim.Optimizer], None]
    step_end: Callable[[], None] | None
    """``init_step_end_hook``: once per training step, after every optimizer of the module has stepped."""


@dataclass(slots=True, eq=False)
class UnusedParameters:
    """``find_unused_parameters=True``: parameters that received no gradient on any rank leave the buckets
    (``bagua_core.module.unused_params``)."""

    enabled: bool = False
    """Whether it is on (``DistributedDataParallel(find_unused_parameters=True)``; kept across re-wraps)."""
    seen: set[str] = field(default_factory=set)
    """The parameters whose gradient arrived in this backward."""
    marks: dict[int, Any] | None = None
    """A model sharded with FSDP2: each sharded parameter's gradient (a weak reference and a copy of its local
    values; by ``id`` of the parameter) when the first backward since the last exchange began
    (``unused_params.mark_sharded_gradients``); None until then."""
    in_use: set[str] | None = None
    """The parameters the buckets were last built for (None: all)."""


@dataclass(slots=True, eq=False)
class Lending:
    """A model sharded with FSDP2: its gradient buckets, lent FSDP2's reduce-scatter output each step
    (``bagua_core.module.sharded``)."""

    buckets: dict[int, BaguaBucket] = field(default_factory=dict)
    """Unit index (``shard.units``) -> the bucket of its gradients."""
    verified: bool = False
    """Whether FSDP2's gradients were found where the lent buckets laid them out (checked once per rebuild)."""


@dataclass(slots=True, eq=False)
class ModuleState:
    """The state of one wrapped module (one ``with_bagua``)."""

    declaration: Any
    """The ``Algorithm`` as declared (its config): what checkpoints name, fault tolerance re-reifies on a new
    quorum and an algorithm handing the module over replaces (``switch_algorithm``)."""
    impl: Any
    """The ``AlgorithmImpl`` running the module (``module.bagua_algorithm``)."""
    capabilities: Capabilities
    """What the running algorithm declares (``module.bagua_capabilities``)."""
    process_group: Any
    """The group the impl was reified on (``module.process_group``): the job's, the user's, the same-shard
    ranks of a sharded model, or a quorum's in fault-tolerant mode."""
    optimizers: list[torch.optim.Optimizer]
    """``module.bagua_optimizers``: those given to ``with_bagua``."""
    module_name: str
    """``module.bagua_module_name``: kept across re-wraps."""
    do_flatten: bool
    """``with_bagua(do_flatten=...)``: flatten each bucket's tensors into one buffer."""
    shard: ShardLayout | None = None
    """A model sharded with FSDP2 inside each node: this rank's layout, the one record of it
    (``bagua_core.module.sharded`` makes it at the wrap); None: replicated."""
    train_step_counter: int = 0
    """``module.bagua_train_step_counter``: training forwards since the wrap (or the resumed count)."""
    buckets: list[BaguaBucket] = field(default_factory=list)
    """``module.bagua_buckets``: made by the impl at every rebuild."""
    sync_enabled: bool = True
    """False inside ``no_sync()``: backward communicates nothing."""
    unused: UnusedParameters = field(default_factory=UnusedParameters)
    """``find_unused_parameters``: whether it is on, and its bookkeeping."""
    handles: list[RemovableHandle] = field(default_factory=list)
    """The handles of every hook the core installed (forward, backward, FSDP2, optimizer)."""
    post_backward_queued: bool = False
    """Whether this backward's end-of-backward callback is queued already."""
    lending: Lending = field(default_factory=Lending)
    """A sharded model: the buckets lent FSDP2's reduce-scatter output."""
    scheduler: BucketScheduler | None = None
    """Launches the buckets in order (rebuilt with them)."""
    hooks: ImplHooks | None = None
    """The impl's hooks (rebuilt with the buckets)."""
    warming_up: bool = False
    """Whether the buckets and hooks are the core's warmup's (the impl's ``warming_up`` said True at their
    last rebuild: ``bagua_core.lifecycle.warmup``) rather than the impl's own."""
    stepped: set[int] = field(default_factory=set)
    """The optimizers (``id``) that stepped in this training step; when every one has, the step ends."""
    features: tuple[Any, ...] = ()
    """The features the module runs with (``bagua_core.lifecycle.feature``), in the order their hooks are called."""
    hook_seconds: float | None = None
    """Seconds the training thread spent in bagua's hooks since a feature last took them
    (``WrappedModule.take_hook_seconds``); None: not counted (no feature asked)."""


    def mark_stepped(self, optimizer: torch.optim.Optimizer) -> bool:
        """Note that ``optimizer`` stepped in this training step; True exactly once per step: when it is the last
        of the module's optimizers to do so (the step ends; the core then runs the impl's step-end hook)."""
        if id(optimizer) in self.stepped or len(self.stepped) >= len(self.optimizers):
            return False
        self.stepped.add(id(optimizer))
        return len(self.stepped) == len(self.optimizers)

    @property
    def step_over(self) -> bool:
        """Whether every optimizer of the module stepped in this training step."""
        return len(self.stepped) >= len(self.optimizers)


def state_of(module: torch.nn.Module) -> ModuleState | None:
    """The module's state, or None when it is not wrapped (never, or since ``bagua_shutdown()``)."""
    return get_state(module, ModuleState)


def shard_group(module: torch.nn.Module) -> Any:
    """The torch process group of the ranks that hold the wrapped ``module`` together with this rank, sharded with
    FSDP2 (the node's mesh: they run the same forwards and backwards, so whatever decides how many a rank runs
    must be agreed over this group); None for a model that is not sharded, or sharded over this rank alone.

    Example::

        >>> group = shard_group(model)
        >>> if group is not None:
        ...     torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=group)
    """
    state = state_of(module)
    if state is None:
        raise RuntimeError(f"{type(module).__name__} is not wrapped (call with_bagua first)")
    layout = state.shard
    return layout.shard_group if layout is not None and layout.count > 1 else None


def params_and_buffers_to_ignore(module: torch.nn.Module) -> list[str]:
    """The names the user listed in ``module._bagua_params_and_buffers_to_ignore`` (the original's
    convention, set before wrapping): neither broadcast nor communicated."""
    return list(getattr(module, "_bagua_params_and_buffers_to_ignore", ()))


def module_name(module: torch.nn.Module) -> str:
    """The module's ``bagua_module_name``: its state's (kept across re-wraps), else ``<Class>_<id>``."""
    state = state_of(module)
    return state.module_name if state is not None else f"{type(module).__name__}_{id(module)}"


def named_parameters(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """Trainable parameters in registration order, less those listed in ``_bagua_params_and_buffers_to_ignore``
    and those marked ``param.allreduce = False`` (the MoE convention for expert parameters, which are sharded over
    ranks, not averaged). Wrapped or not (``with_bagua`` asks it first)."""
    ignore = set(params_and_buffers_to_ignore(module))
    return [
        (n, p)
        for n, p in module.named_parameters()
        if p.requires_grad and n not in ignore and getattr(p, "allreduce", True) is not False
    ]


def build_params(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """``(name, parameter)`` of the parameters to communicate, in registration order: those of
    :func:`named_parameters`, less, when the module was wrapped with ``find_unused_parameters=True``, those that
    received no gradient on any rank in the last backward."""
    params = named_parameters(module)
    state = state_of(module)
    in_use = state.unused.in_use if state is not None else None
    return params if in_use is None else [(n, p) for n, p in params if n in in_use]


def named_buffers(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The module's buffers, less those listed in ``_bagua_params_and_buffers_to_ignore``."""
    ignore = set(params_and_buffers_to_ignore(module))
    return [(n, b) for n, b in module.named_buffers() if n not in ignore]


def wait_for_communication(module: torch.nn.Module) -> None:
    """Launch the buckets not launched yet, then wait for every pending bucket operation (nothing for a module
    that is not wrapped)."""
    state = state_of(module)
    if state is not None and state.scheduler is not None:
        state.scheduler.wait()
