"""``WrappedModule``: what a plugin changes or asks of a module wrapped with ``with_bagua``, through one handle.

The core owns the module's state (:mod:`bagua_core.lifecycle.module_state`; its documented attributes are
read-only); an algorithm changes it through a ``WrappedModule``, which reads the state at each call (a
module shut down since raises there):

- ``WrappedModule.is_wrapped(module)``: whether it is wrapped (and not shut down since);
- ``switch_algorithm(impl=..., declaration=..., capabilities=..., process_group=...)``: the one way to change
  the impl running the module, its declaration, capabilities or group;
- ``set_gradient_sync(enabled)``: whether its backward communicates (``module.no_sync()`` for a block);
- ``is_sharded``: whether it is a model sharded with FSDP2.

Example::

    >>> wrapped = WrappedModule(model)                  # RuntimeError when model is not wrapped
    >>> wrapped.set_gradient_sync(False)                # micro-batches accumulate
    >>> wrapped.set_gradient_sync(True)                 # the next backward communicates the sum
    >>> wrapped.switch_algorithm(impl=chosen.reify(model.process_group), declaration=chosen)
    >>> model.bagua_reset()
"""

from __future__ import annotations

from typing import Any

import torch

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmImpl
from bagua_core.lifecycle.capabilities import Capabilities
from bagua_core.lifecycle.module_state import ModuleState, state_of, switch_algorithm
from bagua_core.lifecycle.tensor import is_sharded

__all__ = ["WrappedModule"]


class WrappedModule:
    """A plugin's handle on a module wrapped with ``with_bagua`` (module doc)."""

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

    def switch_algorithm(self, *, impl: AlgorithmImpl | None = None, declaration: Algorithm | None = None,
                         capabilities: Capabilities | None = None, process_group: Any = None) -> None:
        """Change the impl running the module, its declaration, capabilities or group; what is not given stays.
        The new impl runs the module from the next rebuild of its buckets (``module.bagua_reset()``, or its own
        ``need_reset``). ``impl`` must be an ``AlgorithmImpl`` (else ``BaguaConfigError``)."""
        switch_algorithm(self.module, impl=impl, declaration=declaration, capabilities=capabilities,
                         process_group=process_group)

    def set_gradient_sync(self, enabled: bool) -> None:
        """Whether the module's backward communicates: False accumulates gradients locally until it is True again
        (what ``module.no_sync()`` does for the block it guards)."""
        self._state().sync_enabled = bool(enabled)

    @property
    def is_sharded(self) -> bool:
        """Whether the module is a model sharded with FSDP2 (``DTensor`` parameters)."""
        return is_sharded(self.module)
