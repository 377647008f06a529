"""``get_backend(model_name)``: the communication backend of a wrapped module, found by its name.

The original kept one backend per ``bagua_module_name`` (its Rust scheduler); algorithms written for it
call ``bagua_module._bagua_backend.wait_pending_comm_ops()``. Here the backend of a module is a view of
its bucket scheduler.

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce")
    >>> get_backend(model.bagua_module_name).wait_pending_comm_ops()
"""

from __future__ import annotations

import weakref

import torch

from bagua_core.runtime.exceptions import BaguaError
from bagua_core.lifecycle.module_state import state_of
from bagua_core.lifecycle.scheduler import BucketScheduler

__all__ = ["ModuleBackend", "get_backend", "register_module"]

_modules: weakref.WeakValueDictionary[str, torch.nn.Module] = weakref.WeakValueDictionary()


class ModuleBackend:
    """The communication of one wrapped module."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._module = weakref.ref(module)

    @property
    def module(self) -> torch.nn.Module:
        module = self._module()
        if module is None:
            raise BaguaError("the module of this backend no longer exists")
        return module

    def wait_pending_comm_ops(self) -> None:
        """Launch the buckets not launched yet and wait for every pending bucket operation."""
        self.module.bagua_wait_for_communication()

    def register_ordered_buckets(self, buckets: list) -> None:
        """Use ``buckets`` (launched strictly in this order) for the module's communication."""
        module = self.module
        state = state_of(module)
        if state is None:
            raise BaguaError(f"module {module.bagua_module_name!r} is not wrapped (bagua_shutdown() was called)")
        old = state.scheduler
        if old is not None:
            old.synchronize()
            old.detach()
        state.buckets = list(buckets)
        state.scheduler = BucketScheduler(state.buckets, state.process_group.worker, state.hooks.bucket_ready)


def register_module(module: torch.nn.Module) -> None:
    """Make ``module`` the one ``get_backend(module.bagua_module_name)`` serves (``with_bagua`` calls it)."""
    _modules[module.bagua_module_name] = module


def get_backend(model_name: str) -> ModuleBackend:
    """The backend of the wrapped module named ``model_name`` (its ``bagua_module_name``)."""
    module = _modules.get(model_name)
    if module is None:
        known = ", ".join(sorted(_modules)) or "none"
        raise BaguaError(f"no module named {model_name!r} is wrapped by with_bagua in this process (wrapped: {known})")
    return ModuleBackend(module)
