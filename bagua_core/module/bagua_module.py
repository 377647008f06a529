"""``model.with_bagua(optimizers, algorithm)``, and what a wrapped module can do.

``import bagua_core`` adds one name to ``torch.nn.Module``: ``with_bagua``. Wrapping makes the module's class
``Bagua<Class>`` (a subclass of :class:`BaguaModule` and of its own class, made once per class, as FSDP2's
``fully_shard`` makes ``FSDP<Class>``), which it stays after ``bagua_shutdown()``. Each method is a function of this
module taking the module, which the core calls and a plugin reaches through ``bagua_core.api.WrappedModule``.

Example::

    >>> model = torch.nn.Linear(4, 2).with_bagua([optimizer], "gradient_allreduce")
    >>> type(model).__name__, isinstance(model, torch.nn.Linear)
    ('BaguaLinear', True)
    >>> model.bagua_shutdown(); model.bagua_shutdown()   # the second finds nothing to undo
"""

from __future__ import annotations

import contextlib
from typing import Any
from collections.abc import Iterator, Sequence

import torch

from bagua_core.bootstrap import running_features
from bagua_core.runtime.agreement import Prepared
from bagua_core.lifecycle.algorithm import checked_impl
from bagua_core.lifecycle.capabilities import capabilities_of
from bagua_core.lifecycle.module_state import (
    ModuleState,
    build_params,
    module_name,
    named_buffers,
    named_parameters,
    state_of,
    wait_for_communication,
)
from bagua_core.lifecycle.state import set_state
from bagua_core.selection.config import resolve_algorithm
from bagua_core.selection.features import resolve_features
from bagua_core.module import hooks
from bagua_core.module.data import data_loader
from bagua_core.module.agreed_settings import algorithm_source, feature_settings, wrap_settings
from bagua_core.module.backend import ModuleBackend, register_module
from bagua_core.lifecycle.tensor import is_sharded, local_shard, register_shards
from bagua_core.module import sharded
from bagua_core.module.initial_sync import (
    agree_or_raise,
    broadcast_optimizer_state,
    broadcast_sharded_optimizer_state,
    broadcast_tensors,
    model_signature,
)
from bagua_core.plugins import feature_registry
from bagua_core.runtime.exceptions import BaguaConfigError, BaguaError
from bagua_core.runtime.process_group import get_default_group

__all__ = ["BaguaModule", "build_params", "module_name", "named_buffers", "named_parameters", "no_sync",
           "reset", "shutdown", "wait_for_communication", "with_bagua", "wrapped_class"]


class BaguaModule:
    """What a wrapped module is besides its own class (module doc). After ``with_bagua`` it has the original's attributes
    ``bagua_optimizers``, ``bagua_algorithm`` (the reified impl), ``bagua_capabilities`` (what the
    algorithm declares, ``bagua_core.lifecycle.capabilities``), ``process_group``, ``bagua_module_name``,
    ``bagua_train_step_counter`` and ``bagua_buckets``: read-only properties over
    the one ``ModuleState`` bagua keeps on it (``bagua_core.lifecycle.module_state.state_of(module)``), which
    only the core writes. An installed feature may add names of its own (``Feature.module_attributes``:
    ``model.bagua_metrics()``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)  # (torch.nn.Module's: parameters, buffers, submodules)
        except AttributeError:
            if name.startswith("bagua_"):
                for cls, _ in feature_registry.providers().values():
                    found = cls.module_attributes.get(name)
                    if found is not None:
                        return found(self)
            raise

    def with_bagua(
        self: torch.nn.Module,
        optimizers: Sequence[torch.optim.Optimizer] | torch.optim.Optimizer,
        algorithm: Any = None,
        process_group: Any = None,
        do_flatten: bool = True,
        features: Any = None,
    ) -> torch.nn.Module:
        """Wrap this module for distributed training with ``algorithm`` and return it.

        ``algorithm`` may be an ``Algorithm``, a registered name (``"gradient_allreduce"``), a dict with
        ``name`` and options, a config model, or the path of a .toml/.yaml/.yml/.json file (its top level
        or its ``[algorithm]`` table). ``None`` uses ``BAGUA_CONFIG_FILE`` if set, else gradient_allreduce.
        ``features``: the features to run, names to options (``{"sync_batchnorm": {}}``) or a list of names, beside
        the config file's ``[features.<name>]`` tables (``features`` wins), the process's and those that turn
        themselves on; a re-wrap keeps those of the wrap before. Every rank first compares what decides its
        collectives (``bagua_core.module.agreed_settings``): a difference raises on every rank. Wrapping then
        broadcasts parameters, buffers and optimizer state from the group's first rank (unless a feature keeps each
        rank's own); calling it again switches the algorithm. A model sharded with FSDP2 on each node's ranks runs
        the algorithm between the nodes on each rank's shards (``bagua_core.module.sharded``).

        Example::

            >>> model = torch.nn.Linear(4, 2)
            >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            >>> model = model.with_bagua([optimizer], "gradient_allreduce")
        """
        if isinstance(optimizers, torch.optim.Optimizer):
            optimizers = [optimizers]
        optimizers = list(optimizers)
        register_shards(self)  # an evaluation's forward may have left FSDP2's root unsharded
        shards = is_sharded(self)
        if shards:  # FSDP2 inside the nodes: the algorithm runs on local shards, between the nodes
            do_flatten = False  # FSDP2 owns the shards' storage (a bucket is lent its reduce-scatter output)
        job = get_default_group()
        group = process_group if process_group is not None else job
        previous = state_of(self)
        if previous is not None:  # a re-wrap: what the user set on the module's state stays
            hooks.uninstall(self, previous)
        name = previous.module_name if previous is not None else module_name(self)
        named = named_parameters(self) + named_buffers(self)

        def prepare() -> Prepared:
            declaration = resolve_algorithm(algorithm, optimizers)
            chosen = resolve_features(features, algorithm, self, running_features(),
                                      previous.features if previous is not None else ())
            for feature in chosen:
                feature.check(self, declaration)
            found = None
            if shards:
                if process_group is not None:
                    raise BaguaConfigError("with_bagua(process_group=...) takes a replicated model; for a model "
                                           "sharded with FSDP2 bagua's group is the ranks of the other nodes holding "
                                           "the same shard (leave process_group out)")
                if not capabilities_of(declaration).supports_sharding:
                    raise BaguaConfigError(
                        f"algorithm {declaration.name!r} does not support models sharded with FSDP2 (its "
                        f"capabilities declare no supports_sharding); those that do: "
                        f"{', '.join(sharded.algorithms_supporting_sharding())}")
                found = sharded.check_model(self)
            fields, info = wrap_settings(declaration, group, do_flatten, optimizers, algorithm_source(algorithm))
            fields.update(feature_settings(self, chosen))
            if found is not None:
                fields["sharded: ranks sharing the model on a node (FSDP2 mesh)"] = len(found[1])
            return Prepared((declaration, found, chosen), fields, info)

        declaration, found, chosen = agree_or_raise(group.get_global_communicator(), prepare, model_signature(named))
        for feature in chosen:
            feature.setup(self, optimizers)
        own_weights = [feature.keeps_own_weights(self, declaration) for feature in chosen]
        layout = None
        if found is not None:
            layout, group = sharded.make_layout(*found, job)  # collective
        comm = group.get_global_communicator()
        named = named_parameters(self) + named_buffers(self)  # (a feature's setup may have converted layers)
        if not any(own_weights):  # (a feature may keep each rank's own: a per-rank checkpoint resumed)
            if layout is None:
                broadcast_tensors([t for _, t in named], src=0, comm=comm)
                for optimizer in optimizers:
                    broadcast_optimizer_state(optimizer, src=0, comm=comm)
            else:  # each shard from the first node's holder; the buffers (not sharded) from rank 0 of the job
                broadcast_tensors([local_shard(p) for _, p in named_parameters(self)], src=0, comm=comm)
                broadcast_tensors([b for _, b in named_buffers(self)], src=0, comm=job.get_global_communicator())
                for optimizer in optimizers:
                    broadcast_sharded_optimizer_state(optimizer, src=0, comm=comm)
        impl = checked_impl(declaration.reify(group), f"{type(declaration).__name__}.reify() returned")
        state = ModuleState(declaration, impl, capabilities_of(declaration, impl), group, optimizers, name, do_flatten,
                            shard=layout, features=tuple(chosen))
        if previous is not None:
            state.unused.enabled = previous.unused.enabled
        set_state(self, state)  # (replaces what a feature kept there for this wrap: a checkpoint loaded before it)
        self.__class__ = wrapped_class(type(self))
        register_module(self, shutdown)
        hooks.install(self, state)
        for feature in chosen:
            feature.wrapped(self)
        return self

    def bagua_named_parameters(self: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
        """:func:`named_parameters`."""
        return named_parameters(self)

    def bagua_build_params(self: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
        """:func:`build_params`.

        Example::

            >>> [name for name, _ in model.bagua_build_params()]
            ['0.weight', '0.bias', '2.weight', '2.bias']
        """
        return build_params(self)

    def bagua_named_buffers(self: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
        """:func:`named_buffers`."""
        return named_buffers(self)

    @property
    def _bagua_backend(self: torch.nn.Module) -> ModuleBackend:
        """The module's backend (``wait_pending_comm_ops()``), as the original's algorithms use it."""
        return ModuleBackend(self)

    @property
    def bagua_ddp(self: torch.nn.Module) -> torch.nn.Module:
        """The object the original's algorithm hooks receive: here the wrapped module itself."""
        return self

    def no_sync(self: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Skip communication inside the block: gradients accumulate locally (as with torch DDP) and are
        communicated by the first backward after it.

        Example::

            >>> with model.no_sync():
            ...     model(x1).sum().backward()
            >>> model(x2).sum().backward()     # communicates the sum of both gradients
        """
        return no_sync(self)

    def bagua_wait_for_communication(self: torch.nn.Module) -> None:
        """:func:`wait_for_communication`."""
        wait_for_communication(self)

    def bagua_data_loader(self: torch.nn.Module, dataset: Any, batch_size: int = 1, *, shuffle: bool = True,
                          seed: int = 0, drop_last: bool = False, **loader_options: Any) -> Any:
        """The ``DataLoader`` of this rank's share of ``dataset``, as the module's features shape it (a cache, a
        load-balancing sampler; else torch's ``DistributedSampler``): :func:`bagua_core.module.data.data_loader`.

        Example::

            >>> loader = model.bagua_data_loader(dataset, batch_size=32, seed=0, drop_last=True)
            >>> for epoch in range(epochs):
            ...     loader.sampler.set_epoch(epoch)
            ...     for x, y in loader: ...
        """
        return data_loader(self, dataset, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last,
                           **loader_options)

    def bagua_reset(self: torch.nn.Module) -> None:
        """:func:`reset`."""
        reset(self)

    def bagua_shutdown(self: torch.nn.Module) -> None:
        """:func:`shutdown`."""
        shutdown(self)


@contextlib.contextmanager
def no_sync(module: torch.nn.Module) -> Iterator[None]:
    """A block in which ``module``'s backward communicates nothing (:meth:`BaguaModule.no_sync`)."""
    state = state_of(module)
    if state is None:  # not wrapped: nothing communicates anyway
        yield
        return
    previous, state.sync_enabled = state.sync_enabled, False
    try:
        yield
    finally:
        state.sync_enabled = previous


def reset(module: torch.nn.Module) -> None:
    """Redo tensors, buckets and operations (the impl's ``need_reset`` asks for it)."""
    state = state_of(module)
    if state is None:
        raise BaguaError(f"bagua_reset: {type(module).__name__} is not wrapped (call with_bagua first)")
    hooks.rebuild_buckets(module, state)


def shutdown(module: torch.nn.Module) -> None:
    """Remove bagua's hooks and stop the algorithm's background work; the module trains plainly again: its
    ``ModuleState`` goes, and with it the attributes read from it (``bagua_algorithm`` and the others raise "not
    wrapped"). Nothing for a module that is not wrapped (or shut down already)."""
    state = state_of(module)
    if state is not None:
        hooks.uninstall(module, state)


def _wrapped(module: torch.nn.Module, attribute: str) -> ModuleState:
    state = state_of(module)
    if state is None:
        raise AttributeError(f"{type(module).__name__} has no {attribute}: it is not wrapped (call with_bagua first)")
    return state


def _read_only(attribute: str, field: str, doc: str) -> property:
    def get(module: torch.nn.Module) -> Any:
        value = _wrapped(module, attribute)
        for part in field.split("."):
            value = getattr(value, part)
        return value

    def refuse(module: torch.nn.Module, value: Any) -> None:
        raise AttributeError(f"{attribute} is bagua's: with_bagua sets it (an algorithm changes the impl through "
                             f"bagua_core.api.WrappedModule.switch_algorithm)")

    return property(get, refuse, doc=doc)


def _get_process_group(module: torch.nn.Module) -> Any:
    state = state_of(module)
    if state is not None:
        return state.process_group
    try:  # a module of torch's or the user's that keeps its own (SyncBatchNorm, DDP)
        return module.__dict__["process_group"]
    except KeyError:
        raise AttributeError(f"{type(module).__name__} has no process_group") from None


def _set_process_group(module: torch.nn.Module, value: Any) -> None:
    if state_of(module) is not None:
        raise AttributeError("process_group of a wrapped module is bagua's: pass with_bagua(process_group=...)")
    module.__dict__["process_group"] = value


PROPERTIES = {
    "bagua_algorithm": _read_only("bagua_algorithm", "impl", "The impl running the module."),
    "bagua_capabilities": _read_only("bagua_capabilities", "capabilities", "What the running algorithm declares."),
    "bagua_optimizers": _read_only("bagua_optimizers", "optimizers", "The optimizers given to with_bagua."),
    "bagua_train_step_counter": _read_only("bagua_train_step_counter", "train_step_counter",
                                           "Training forwards since the wrap (or the resumed count)."),
    "bagua_buckets": _read_only("bagua_buckets", "buckets", "The buckets the impl made."),
    "bagua_module_name": property(module_name, doc="The module's name (bagua's backends find it by it)."),
    "process_group": property(_get_process_group, _set_process_group,
                              doc="The group the algorithm runs on (a wrapped module's is bagua's)."),
}
"""The original's attributes of a wrapped module: properties of :class:`BaguaModule` over its ``ModuleState``
(``process_group`` stays an ordinary attribute of modules bagua does not wrap)."""


def with_bagua(module: torch.nn.Module, optimizers: Any, algorithm: Any = None, process_group: Any = None,
               do_flatten: bool = True, features: Any = None) -> torch.nn.Module:
    """Function form of :meth:`BaguaModule.with_bagua`."""
    return BaguaModule.with_bagua(module, optimizers, algorithm, process_group, do_flatten, features)


_WRAPPED: dict[type, type] = {}
"""Each class wrapped so far -> its ``Bagua<Class>`` (:func:`wrapped_class`)."""

for _name, _prop in PROPERTIES.items():
    setattr(BaguaModule, _name, _prop)


def wrapped_class(cls: type) -> type:
    """``Bagua<cls>``: a subclass of :class:`BaguaModule` and ``cls`` (``cls`` itself when it is one already), made
    once per class, as FSDP2's ``fully_shard`` makes ``FSDP<cls>``."""
    if issubclass(cls, BaguaModule):
        return cls
    made = _WRAPPED.get(cls)
    if made is None:
        made = type(f"Bagua{cls.__name__}", (BaguaModule, cls), {"__module__": cls.__module__,
                                                                 **_feature_attributes()})
        _WRAPPED[cls] = made
    return made


def _feature_attributes() -> dict[str, property]:
    """The names the installed features add to a wrapped module (``Feature.module_attributes``), as read-only
    properties of ``Bagua<Class>`` (``dir`` and ``inspect`` see them); a feature registered later is found by
    ``BaguaModule.__getattr__``."""
    found: dict[str, property] = {}
    for cls, _ in feature_registry.providers().values():
        for name, function in cls.module_attributes.items():
            found.setdefault(name, property(function, doc=f"Added by the feature {cls.name!r}."))
    return found


torch.nn.Module.with_bagua = BaguaModule.with_bagua
