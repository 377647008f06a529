"""``Algorithm`` (a declaration: its validated config) and ``AlgorithmImpl`` (the lifecycle hooks).

What the core calls, in order: docs/design.md ("The lifecycle").
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, ClassVar
from collections.abc import Callable, Sequence

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from bagua_core.runtime import env
from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.lifecycle.capabilities import NOT_DECLARED, Capabilities
from bagua_core.lifecycle.module_state import build_params, module_name, state_of, wait_for_communication
from bagua_core.lifecycle.state import tensor_state_of
from bagua_core.lifecycle.rounds import RoundCount
from bagua_core.lifecycle import proxies
from bagua_core.lifecycle.tensor import local_shard
from bagua_core.runtime.exceptions import BaguaConfigError, format_validation_error
from bagua_core.plugins import algorithm_registry

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.runtime.process_group import BaguaProcessGroup

__all__ = ["AlgorithmConfig", "Algorithm", "AlgorithmImpl", "checked_impl", "group_tensors", "is_gradient_tensor",
           "split_into_buckets", "switch_algorithm"]


class AlgorithmConfig(BaseModel):
    """Base of every algorithm's options. Subclasses set ``name: Literal["their_name"] = "their_name"``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: str
    """The registered name of the algorithm."""


class Algorithm:
    """A declaration of an algorithm: its name, what it can do (``capabilities``, see
    ``bagua_core.lifecycle.capabilities``) and validated options; ``reify`` builds the impl.

    An algorithm spells each option once, in its ``Config``; the class takes the options as keywords
    (its signature is derived from the config) and ``reify`` hands the validated config to ``Impl``.

    Example::

        >>> class MyConfig(AlgorithmConfig):
        ...     name: Literal["mine"] = "mine"
        ...     average: bool = True
        >>> class MyAlgorithm(Algorithm):
        ...     name, Config, Impl = "mine", MyConfig, MyImpl      # MyImpl(process_group, config)
        >>> MyAlgorithm(average=False).reify(group).config.average
        False
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    Impl: ClassVar[type[AlgorithmImpl] | None] = None
    """The impl :meth:`reify` builds as ``Impl(process_group, config)`` (None: the subclass overrides ``reify``)."""
    capabilities: ClassVar[Capabilities] = NOT_DECLARED
    """What the core, the CLI, Lightning, autotune and ``algorithm="auto"`` need to know (class level)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:  # a signature of its own (inspect reads it from __init__)
            cls.__signature__ = None
        elif cls.Config is not AlgorithmConfig:
            cls.__signature__ = _options_signature(cls.Config)

    def __init__(self, **options: Any) -> None:
        try:
            self.config = self.Config(name=self.name, **options)
        except ValidationError as exc:
            raise BaguaConfigError(format_validation_error(exc, f"options for algorithm {self.name!r}")) from None

    def __getattr__(self, item: str) -> Any:  # an option reads as an attribute: algorithm.hierarchical
        config = self.__dict__.get("config")
        if config is not None and item in type(config).model_fields:
            return getattr(config, item)
        raise AttributeError(f"{type(self).__name__} has no attribute {item!r}")

    @classmethod
    def init(cls, name: str, **kwargs: Any) -> Algorithm:
        """The registered algorithm ``name`` built with ``kwargs`` (the original's helper).

        Example::

            >>> Algorithm.init("gradient_allreduce", hierarchical=True)
            GradientAllReduceAlgorithm(hierarchical=True, average=True)
        """
        return algorithm_registry.get(name)(**kwargs)

    @classmethod
    def from_config(cls, config: AlgorithmConfig, optimizers: Sequence[torch.optim.Optimizer] = ()) -> Algorithm:
        """Build the algorithm from a validated config. ``optimizers`` are those given to ``with_bagua``
        (an algorithm that needs its own optimizer, like qadam, finds it there)."""
        return cls(**config.model_dump(exclude={"name"}))

    @classmethod
    def build_optimizer(cls, params: Any, *, lr: float | None = None, steps_per_epoch: int = 1) -> torch.optim.Optimizer:
        """The optimizer this algorithm needs (``capabilities.builds_optimizer``) over ``params``, with
        learning rate ``lr`` (None: the algorithm's default) for a job of ``steps_per_epoch`` steps per
        epoch; pass it to ``with_bagua``. Raises ``BaguaConfigError`` for an algorithm that does not
        build one (any optimizer works with it).

        Example::

            >>> algorithm = algorithm_registry.get(name)
            >>> if algorithm.capabilities.builds_optimizer:
            ...     optimizer = algorithm.build_optimizer(model.parameters(), lr=0.005, steps_per_epoch=100)
        """
        raise BaguaConfigError(f"algorithm {cls.name!r} builds no optimizer of its own: use any torch optimizer")

    def capabilities_for(self, impl: AlgorithmImpl) -> Capabilities:
        """What this algorithm declares, running ``impl`` (``bagua_core.lifecycle.capabilities.capabilities_of``
        asks): its class's ``capabilities``, or the defaults when it declares none. (The original's algorithm
        classes, ``bagua.torch_api.algorithms``, fold in what their impls say in the original's form.)"""
        declared = type(self).capabilities
        return Capabilities() if declared is NOT_DECLARED else declared

    def canonical_options(self) -> dict[str, Any]:
        """Every validated option in a canonical form (JSON types where possible), less ``name``: what
        ``with_bagua`` compares across ranks before the first collective. An algorithm whose behaviour
        depends on more than its config (qadam: its optimizer's warmup) adds those values here."""
        try:
            return self.config.model_dump(mode="json", exclude={"name"})
        except Exception:  # a plugin's option without a JSON form: compare the Python values
            return self.config.model_dump(exclude={"name"})

    def reify(self, process_group: BaguaProcessGroup) -> AlgorithmImpl:
        """Create the implementation bound to ``process_group``: ``Impl(process_group, config)``. What
        the impl may assume about who trains with it is ``process_group.membership``
        (:class:`~bagua_core.runtime.membership.Membership`: fixed, or replicas that come and go)."""
        if self.Impl is None:
            raise NotImplementedError(f"{type(self).__name__} sets no Impl and does not override reify")
        return self.Impl(process_group, self.config)

    def __repr__(self) -> str:
        if "config" not in self.__dict__:
            return f"{type(self).__name__}()"
        options = ", ".join(f"{k}={v!r}" for k, v in self.config.model_dump(exclude={"name"}).items())
        return f"{type(self).__name__}({options})"


def _options_signature(config: type[AlgorithmConfig]) -> inspect.Signature:
    """``(*, option=default, ...)`` of every field of ``config`` but ``name``."""
    parameters = [
        inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY,
                          default=info.default if not info.is_required() else inspect.Parameter.empty,
                          annotation=info.annotation)
        for field, info in config.model_fields.items() if field != "name"
    ]
    return inspect.Signature(parameters)


def group_tensors(tensors: Sequence[torch.Tensor], bucket_size: int) -> list[list[torch.Tensor]]:
    """The core's bucketing suggestion: ``tensors`` in order, in groups of about ``bucket_size`` bytes (a
    new group also starts where the dtype or device of the effective tensors changes). The core hands
    it to ``AlgorithmImpl.tensors_to_buckets``."""
    groups: list[list[torch.Tensor]] = []
    current: list[torch.Tensor] = []
    current_bytes = 0
    for tensor in tensors:
        effective = proxies.effective(tensor)
        if current:
            first = proxies.effective(current[0])
            if first.dtype != effective.dtype or first.device != effective.device:
                groups.append(current)
                current, current_bytes = [], 0
        current.append(tensor)
        current_bytes += effective.numel() * effective.element_size()
        if current_bytes >= bucket_size:
            groups.append(current)
            current, current_bytes = [], 0
    if current:
        groups.append(current)
    return groups


def split_into_buckets(
    tensors: Sequence[torch.Tensor], bucket_size: int, do_flatten: bool, name_prefix: str = "bucket", alignment: int = 1
) -> list[BaguaBucket]:
    """One bucket per group of :func:`group_tensors`."""
    return [
        BaguaBucket(group, f"{name_prefix}_{i}", do_flatten, alignment)
        for i, group in enumerate(group_tensors(tensors, bucket_size))
    ]


def _grad_of(param: torch.Tensor) -> torch.Tensor:
    return param.grad


def _set_grad(param: torch.Tensor, value: torch.Tensor) -> None:
    param.grad = value


def is_gradient_tensor(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a parameter whose effective tensor is its gradient, as the default
    :meth:`AlgorithmImpl.init_tensors` makes it (the core may then hand the bucket its gradients as they come:
    a sharded model's reduce-scatter output)."""
    state = tensor_state_of(tensor)
    return state is not None and state.getter is _grad_of


class AlgorithmImpl:
    """The hooks of an algorithm. The defaults implement plain bucketed gradient communication.

    Every hook receives ``bagua_module`` (the name the original's API documents): the wrapped module, which an
    algorithm reads and changes through ``bagua_core.api.WrappedModule(bagua_module)`` (``build_params()``,
    ``module_name``, ``buckets``, ``optimizers``, ``train_step_counter``, ``process_group``,
    ``wait_for_communication()``, ...), not through attributes of the module. (The original's impl classes,
    ``bagua.torch_api.algorithms``, also take it as ``bagua_ddp=``, read their options as attributes and declare
    capabilities in the original's impl-level form.)"""

    hands_module_over: ClassVar[bool] = False
    """True for an impl that hands the module over to another impl while training (``algorithm="auto"``
    hands it to its choice through ``switch_algorithm``): autotune leaves it alone and tunes the impl it hands
    over to. Default: False."""
    bucket_size: int | None = None
    """The size in bytes of the groups the core suggests to :meth:`tensors_to_buckets` (set by autotune, and by
    ``DistributedDataParallel(bucket_cap_mb=...)``); None, the default: ``BAGUA_DEFAULT_BUCKET_SIZE``."""

    def __init__(self, process_group: BaguaProcessGroup, config: AlgorithmConfig | None = None) -> None:
        self.process_group = process_group
        if config is not None:
            self.config = config  # the validated options (the algorithm's Config)

    @property
    def hierarchical(self) -> bool | None:
        """Whether the impl communicates hierarchically (intra-node, then between nodes' leaders); None: it has no
        such option. Autotune tries both values of a boolean ``hierarchical`` on several nodes
        (``Capabilities.tunable_bucket_size``) by setting it. Default: what was set on the impl (by autotune, or
        by an impl written for the original in its ``__init__``), else the config's ``hierarchical`` option where
        the config has one, else None."""
        if "hierarchical" in self.__dict__:
            return self.__dict__["hierarchical"]
        config = self.__dict__.get("config")
        return config.hierarchical if config is not None and "hierarchical" in type(config).model_fields else None

    @hierarchical.setter
    def hierarchical(self, value: bool | None) -> None:
        self.__dict__["hierarchical"] = value

    def _has_background_controls(self) -> bool:
        """Whether the impl's class overrides both :meth:`abort` and :meth:`resume` (what an algorithm declaring
        ``Capabilities.background_work`` needs)."""
        cls = type(self)
        return cls.abort is not AlgorithmImpl.abort and cls.resume is not AlgorithmImpl.resume

    def need_reset(self) -> bool:
        """Asked before every forward; True rebuilds tensors, buckets and operations."""
        return False

    def warming_up(self, bagua_module: torch.nn.Module) -> bool:
        """Whether the module trains in the core's warmup now (asked when the buckets are built and before every
        training forward, after :meth:`need_reset`): while True, the core runs full-precision bucketed gradient
        allreduce instead of this impl's tensors, operations and hooks (``bagua_core.lifecycle.warmup``); a change of
        answer rebuilds the buckets. The impl stays the module's throughout (its ``state_dict``, ``abort``, ...
        are asked as at any step). Every rank must answer alike at the same step. Default: False.

        Example::

            >>> def warming_up(self, bagua_module):  # plain allreduce for the first warmup_steps steps
            ...     return WrappedModule(bagua_module).train_step_counter <= self.config.warmup_steps
        """
        return False

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        """The tensors to communicate: the module's ``build_params()`` in reverse registration
        order, effective tensor ``.grad`` (given a zero gradient where it has none, but for a model sharded
        with FSDP2, whose gradients FSDP2 assigns)."""
        tensors = []
        owner = module_name(bagua_module)
        for name, param in reversed(build_params(bagua_module)):
            if local_shard(param) is param:  # (a sharded parameter's gradient is FSDP2's to assign)
                proxies.ensure_grad(param)
            tensors.append(proxies.mark(param, name, owner, _grad_of, _set_grad))
        return tensors

    def bucket_size_bytes(self) -> int:
        """The size of the groups the core suggests: :attr:`bucket_size` when set (autotune sets it),
        else ``BAGUA_DEFAULT_BUCKET_SIZE``."""
        return self.bucket_size or env.get_default_bucket_size()

    def tensors_to_buckets(self, tensors: list[list[torch.Tensor]], do_flatten: bool) -> list[BaguaBucket]:
        """Turn the core's suggestion (``tensors`` grouped into lists of about the bucket size, see
        :func:`group_tensors`) into buckets: one per group, as suggested."""
        return [BaguaBucket(group, f"bucket_{i}", do_flatten) for i, group in enumerate(tensors)]

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        """Append the bucket's communication operations (none by default)."""
        bucket.clear_ops()

    def init_forward_pre_hook(self, bagua_module: torch.nn.Module) -> Callable[[Any], None]:
        def hook(inputs: Any) -> None:
            return None

        return hook

    def init_backward_hook(self, bagua_module: torch.nn.Module) -> Callable[[str, torch.nn.Parameter], None]:
        """Called with each parameter once its gradient is accumulated: mark it ready."""

        def hook(parameter_name: str, parameter: torch.nn.Parameter) -> None:
            state = tensor_state_of(parameter)
            if state is not None and state.bucket is not None:
                state.bucket.mark_ready(parameter)  # (what tensors.mark_ready does, the state in hand)

        return hook

    def init_bucket_ready_hook(self, bagua_module: torch.nn.Module) -> Callable[[BaguaBucket], None] | None:
        """Return ``hook(bucket)`` to run when a bucket is launched, or None (the default). It runs once per bucket
        per backward, strictly in bucket order, on the thread that marked the bucket's last tensor ready (autograd's
        during backward, the training thread for buckets launched at the end of backward), before the bucket's
        operations are handed to the communication thread: the place for work that belongs inside backward, per
        bucket (stepping a per-bucket optimizer). Keep collectives out of it unless every rank issues them in the
        same order. Rebuilt with the buckets.

        Example::

            >>> def init_bucket_ready_hook(self, bagua_module):
            ...     return lambda bucket: self.bucket_optimizers[bucket.name].step()
        """
        return None

    def init_post_backward_hook(self, bagua_module: torch.nn.Module) -> Callable[[], None]:
        """Runs at the end of backward: by default launches what is left and waits for it."""

        def hook() -> None:
            wait_for_communication(bagua_module)

        return hook

    def init_post_optimizer_step_hook(self, bagua_module: torch.nn.Module) -> Callable[[torch.optim.Optimizer], None]:
        """Called after each of the module's optimizers steps, with that optimizer (the original's hook)."""
        def hook(optimizer: torch.optim.Optimizer) -> None:
            return None

        return hook

    def init_step_end_hook(self, bagua_module: torch.nn.Module) -> Callable[[], None] | None:
        """Return ``hook()`` to run once per training step when every optimizer of the module has stepped (inside
        the last one's ``step()``, on the training thread, after its post-step hook), or None (the default). The
        core counts the optimizers: an algorithm that communicates after the step does it here. A step whose
        optimizers did not all run (a ``GradScaler`` skipped it) has no end; the next forward comes instead.

        Example::

            >>> def init_step_end_hook(self, bagua_module):
            ...     return lambda: self.average_parameters(bagua_module) if self.is_sync_step() else None
        """
        return None

    def state_dict(self) -> dict[str, Any]:
        """What this rank needs, beyond the model and its optimizers, to resume exactly (replicas,
        per-bucket optimizers, step counts of the algorithm's own: tensors, numbers, strings, lists and
        dicts of them). ``save_checkpoint`` calls it after the step, before taking the model's state dict,
        and saves it per rank when it is not empty. Default: no state."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (once the module is wrapped and its buckets built:
        ``load_checkpoint`` on the wrapped module, or ``with_bagua`` after ``load_checkpoint``)."""
        if state:
            raise BaguaConfigError(f"{type(self).__name__} keeps no state, but the checkpoint holds algorithm state "
                                   f"with keys {sorted(state)}")

    def communicates_after_optimizer_step(self, bagua_module: torch.nn.Module) -> bool:
        """Whether this step's optimizer step is followed by collectives (issued by the post-step hook).
        Asked at the end of every backward, only for an algorithm declaring
        ``Capabilities.communicates_after_optimizer_step`` (or whose impl overrides this method); when
        True, the ranks agree whether any rank's gradients hold inf/NaN and, if so, every rank's
        gradients get a NaN (``bagua_core.module.nonfinite``), so a ``GradScaler`` skips the step, and
        with it the post-step collectives, on every rank. Default: every step (as declared)."""
        return True

    def abort(self, bagua_module: torch.nn.Module) -> None:
        """Stop the communication this impl runs in the background, collectively: it returns once every rank
        aborted (call it before destroying the process group). An algorithm declaring
        ``Capabilities.background_work`` overrides it and :meth:`resume`. Default: nothing (no background
        work)."""
        return None

    def resume(self, bagua_module: torch.nn.Module) -> None:
        """Restart the background communication :meth:`abort` stopped. Default: nothing (no background work)."""
        return None

    def quiesce(self, bagua_module: torch.nn.Module) -> None:
        """Fault-tolerant mode: finish and stop the communication this impl runs outside the training thread
        (a background thread's collectives between replicas) and apply nothing of it that failed. The
        runtime calls it on every replica at the end of each step, before the step's commit decision (so the
        decision covers that communication), and before joining the next step's quorum (which may reconfigure
        the group under it); the impl restarts its background work itself, e.g. at its next forward. An
        exception is reported as the step's failure. Default: nothing (no background communication)."""
        return None

    def round_syncs(self, bagua_module: torch.nn.Module) -> bool:
        """Fault-tolerant mode, for an algorithm declaring ``FaultTolerance(commit="at_round")``: whether the
        training step about to begin (asked before its first forward) ends with the round's exchange between
        replicas. On True the runtime joins the lighthouse's quorum first: the exchange runs between the replicas
        alive then (one that died earlier in the round is left out, a joiner is healed there, the impl reified
        again on a new quorum's group); on False the step runs on the group it has. Every replica of a quorum
        must answer alike at the same step. Default: True (a quorum before every step)."""
        return True

    def round_ends(self, bagua_module: torch.nn.Module) -> bool:
        """Fault-tolerant mode, for an algorithm declaring ``FaultTolerance(commit="at_round")``: whether the
        training step that just ended (every optimizer stepped, the step-end hook ran) ends a round. The runtime
        asks it once per step; on True it decides the round's commit there, and the next step takes a copy of the
        training state, the point a failed round is restored to; on False the next step continues the round
        without one (the quorum is joined where :meth:`round_syncs` says). Every
        replica of a quorum must answer alike at the same step (a round's exchange runs between them). Default:
        True (every step is a round: the transaction of ``commit="after_step"``)."""
        return True

    def shutdown(self, bagua_module: torch.nn.Module) -> None:
        """Release what the impl started (threads, groups) when the module is re-wrapped or closed."""
        return None

    def rounds_completed(self) -> RoundCount | None:
        """For an algorithm that communicates in rounds rather than once per step (every H inner steps, on a
        background thread): the rounds this impl completed on this rank since it was reified and their
        full-precision bytes (:class:`~bagua_core.lifecycle.rounds.RoundCount`), read by the module's metrics
        at the end of each step. Default None: every step that hands bytes to a collective is a round."""
        return None


def checked_impl(impl: object, source: str) -> AlgorithmImpl:
    """``impl``, once it is known to be an :class:`AlgorithmImpl`: the core calls its hooks without asking whether
    it has them (each has a default). Where an impl is installed (``with_bagua`` right after ``reify``,
    ``switch_algorithm``), ``source`` says where it came from, e.g. ``"MyAlgorithm.reify() returned"``.

    Raises ``BaguaConfigError`` for anything else::

        >>> checked_impl(object(), "MyAlgorithm.reify() returned")
        Traceback (most recent call last):
        BaguaConfigError: MyAlgorithm.reify() returned object, not a bagua_core.api.AlgorithmImpl subclass ...
    """
    if not isinstance(impl, AlgorithmImpl):
        kind = type(impl)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        raise BaguaConfigError(f"{source} {name}, not a bagua_core.api.AlgorithmImpl subclass (an impl derives "
                               f"from AlgorithmImpl, whose hooks all have defaults: docs/plugins.md)")
    return impl


def switch_algorithm(module: torch.nn.Module, *, impl: AlgorithmImpl | None = None,
                     declaration: Algorithm | None = None, capabilities: Capabilities | None = None,
                     process_group: Any = None) -> None:
    """The one way the impl running a wrapped module, its declaration, its capabilities and its group change
    after the wrap: an algorithm that tries candidates or hands the module to the one it chose, a new quorum's
    group in fault-tolerant mode. What is not given stays; a new group is announced to the module's features
    (``Feature.membership_changed``), before the buckets are rebuilt on it. The new impl runs the module from the next rebuild
    of its buckets (``module.bagua_reset()``, or its own ``need_reset``). ``impl`` must be an ``AlgorithmImpl``
    (else ``BaguaConfigError``).

    Example::

        >>> switch_algorithm(model, impl=chosen.reify(model.process_group), declaration=chosen)
        >>> model.bagua_reset()
    """
    state = state_of(module)
    if state is None:
        raise RuntimeError(f"{type(module).__name__} is not wrapped (call with_bagua first)")
    if impl is not None:
        name = (declaration or state.declaration).name
        state.impl = checked_impl(impl, f"switch_algorithm(impl=...) for algorithm {name!r} was given")
    if declaration is not None:
        state.declaration = declaration
    if capabilities is not None:
        state.capabilities = capabilities
    if process_group is not None:
        state.process_group = process_group
        for feature in state.features:
            feature.membership_changed(module)
