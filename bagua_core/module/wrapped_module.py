"""``WrappedModule``: what a plugin reads, changes or asks of a module wrapped with ``with_bagua``, through one handle.

The core owns the module's state (:mod:`bagua_core.lifecycle.module_state`); an algorithm or a feature reaches
it through a ``WrappedModule``, never through attributes of the module, and the handle reads the state at each call
(a module shut down since raises there): what the module is (``impl``, ``process_group``, ``buckets``, ...), its
tensors, what it does (``reset()``, ``wait_for_communication()``, ``switch_algorithm(...)``, the one way to change
the impl, its declaration, capabilities or group), and a feature's side (``features``, ``add_feature``, the
seconds in bagua's hooks, the features' state).

Example::

    >>> wrapped = WrappedModule(model)                  # RuntimeError when model is not wrapped
    >>> if wrapped.train_step_counter % 10 == 0:
    ...     params = [p for _, p in wrapped.build_params()]
    >>> wrapped.set_gradient_sync(False)                # micro-batches accumulate
    >>> wrapped.set_gradient_sync(True)                 # the next backward communicates the sum
    >>> wrapped.switch_algorithm(impl=chosen.reify(wrapped.process_group), declaration=chosen)
    >>> wrapped.reset()
"""

from __future__ import annotations

from typing import Any

import torch

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmImpl, switch_algorithm
from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.lifecycle.capabilities import Capabilities
from bagua_core.lifecycle.feature import Feature
from bagua_core.lifecycle.module_state import (
    ModuleState,
    build_params,
    named_buffers,
    named_parameters,
    state_of,
    wait_for_communication,
)
from bagua_core.lifecycle.tensor import is_sharded
from bagua_core.module import bagua_module

__all__ = ["WrappedModule"]


class WrappedModule:
    """A plugin's handle on a module wrapped with ``with_bagua`` (module doc)."""

    __slots__ = ("module",)

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self._state()

    @staticmethod
    def is_wrapped(module: torch.nn.Module) -> bool:
        """Whether ``module`` is wrapped by ``with_bagua`` (and not shut down since)."""
        return state_of(module) is not None

    def _state(self) -> ModuleState:
        state = state_of(self.module)
        if state is None:
            raise RuntimeError(f"{type(self.module).__name__} is not wrapped (call with_bagua first)")
        return state

    @property
    def module_name(self) -> str:
        """The module's name (``bagua_module_name``): bagua's backends find the module by it."""
        return self._state().module_name

    @property
    def process_group(self) -> Any:
        """The group the impl runs on: the job's, the user's, the same-shard ranks of a sharded model, or a quorum's
        in fault-tolerant mode."""
        return self._state().process_group

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers given to ``with_bagua``."""
        return self._state().optimizers

    @property
    def buckets(self) -> list[BaguaBucket]:
        """The buckets the impl made at the last rebuild."""
        return self._state().buckets

    @property
    def impl(self) -> AlgorithmImpl:
        """The impl running the module."""
        return self._state().impl

    @property
    def capabilities(self) -> Capabilities:
        """What the running algorithm declares."""
        return self._state().capabilities

    @property
    def train_step_counter(self) -> int:
        """Training forwards since the wrap (or the count a checkpoint resumed)."""
        return self._state().train_step_counter

    @property
    def is_sharded(self) -> bool:
        """Whether the module is a model sharded with FSDP2 (``DTensor`` parameters)."""
        return is_sharded(self.module)

    def named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """``(name, parameter)`` of the parameters bagua trains: trainable, not listed in
        ``_bagua_params_and_buffers_to_ignore``, not marked ``param.allreduce = False``."""
        return named_parameters(self.module)

    def build_params(self) -> list[tuple[str, torch.nn.Parameter]]:
        """:meth:`named_parameters` less, with ``find_unused_parameters=True``, those that received no gradient on
        any rank in the last backward: the parameters to communicate."""
        self._state()
        return build_params(self.module)

    def named_buffers(self) -> list[tuple[str, torch.Tensor]]:
        """The module's buffers, less those listed in ``_bagua_params_and_buffers_to_ignore``."""
        return named_buffers(self.module)

    def reset(self) -> None:
        """Rebuild the module's tensors, buckets and operations now (what the impl's ``need_reset`` asks for)."""
        bagua_module.reset(self.module)

    def wait_for_communication(self) -> None:
        """Launch the buckets not launched yet, then wait for every pending bucket operation."""
        self._state()
        wait_for_communication(self.module)

    def shutdown(self) -> None:
        """Remove bagua's hooks and stop the algorithm's background work (``module.bagua_shutdown()``)."""
        bagua_module.shutdown(self.module)

    def switch_algorithm(self, *, impl: AlgorithmImpl | None = None, declaration: Algorithm | None = None,
                         capabilities: Capabilities | None = None, process_group: Any = None) -> None:
        """Change the impl running the module, its declaration, capabilities or group; what is not given stays.
        The new impl runs the module from the next rebuild of its buckets (:meth:`reset`, or its own
        ``need_reset``). ``impl`` must be an ``AlgorithmImpl`` (else ``BaguaConfigError``)."""
        switch_algorithm(self.module, impl=impl, declaration=declaration, capabilities=capabilities,
                         process_group=process_group)

    @property
    def features(self) -> tuple[Feature, ...]:
        """The features the module runs with, in the order their hooks are called."""
        return self._state().features

    def add_feature(self, feature: Feature) -> None:
        """Run ``feature`` from now on, called by the feature's own API after the wrap (``module.bagua_metrics()``):
        its :meth:`~Feature.wrapped` hook runs at once. Such a feature is not agreed across ranks, so it must
        issue no collective and change nothing that decides one. A feature of the same name is replaced."""
        state = self._state()
        state.features = tuple(f for f in state.features if f.name != feature.name) + (feature,)
        feature.wrapped(self.module)

    def features_state_dict(self) -> dict[str, Any]:
        """Every feature's ``state_dict``, by name (those that keep none are left out)."""
        states = {f.name: f.state_dict(self.module) for f in self._state().features}
        return {name: state for name, state in states.items() if state}

    def load_features_state_dict(self, states: dict[str, Any]) -> None:
        """Hand each running feature its part of :meth:`features_state_dict`'s result (a part for a feature not
        running is left out)."""
        for feature in self._state().features:
            if feature.name in states:
                feature.load_state_dict(self.module, states[feature.name])

    def count_hook_seconds(self) -> None:
        """Count from now on the seconds the training thread spends in bagua's hooks (``take_hook_seconds``)."""
        state = self._state()
        if state.hook_seconds is None:
            state.hook_seconds = 0.0

    def take_hook_seconds(self) -> float:
        """The seconds counted since the last take (0.0 when nothing counts them); counting goes on from 0."""
        state = self._state()
        taken = state.hook_seconds or 0.0
        if state.hook_seconds is not None:
            state.hook_seconds = 0.0
        return taken

    def set_gradient_sync(self, enabled: bool) -> None:
        """Whether the module's backward communicates: False accumulates gradients locally until it is True again
        (what ``module.no_sync()`` does for the block it guards)."""
        self._state().sync_enabled = bool(enabled)
