"""``get_backend(model_name)``: the communication backend of a wrapped module, found by its name; and the wrapped
modules shut down when the job's groups are destroyed.

The original kept one backend per ``bagua_module_name`` (its Rust scheduler); algorithms written for it
call ``bagua_module._bagua_backend.wait_pending_comm_ops()``. Here the backend of a module is a view of
its bucket scheduler.

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce")
    >>> get_backend(model.bagua_module_name).wait_pending_comm_ops()

Every module still wrapped when ``destroy_process_group`` runs (explicitly, or at exit) is shut down first, on
every rank, while the groups work (:func:`shut_down_live_modules`): its pending communication completes and its
algorithm finishes with its peers (``AlgorithmImpl.shutdown``: a replica whose training loop ended sooner than
another's takes part in the rounds the other still runs) instead of leaving them a dead peer. Not in
fault-tolerant mode, where a replica that leaves is one the others survive, nor after a failure of the job.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from bagua_core.runtime.exceptions import BaguaError
from bagua_core.runtime.process_group import before_destroy
from bagua_core.lifecycle.module_state import module_name, state_of, wait_for_communication
from bagua_core.lifecycle.scheduler import BucketScheduler

__all__ = ["ModuleBackend", "get_backend", "register_module", "shut_down_live_modules"]

_modules: weakref.WeakValueDictionary[str, torch.nn.Module] = weakref.WeakValueDictionary()
_live: weakref.WeakKeyDictionary[torch.nn.Module, Callable[[torch.nn.Module], None]] = weakref.WeakKeyDictionary()
"""Every module wrapped and not shut down at the last destroy, in the order first wrapped (the same on every rank),
with the function that shuts it down."""


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
        wait_for_communication(self.module)

    def register_ordered_buckets(self, buckets: list) -> None:
        """Use ``buckets`` (launched strictly in this order) for the module's communication."""
        module = self.module
        state = state_of(module)
        if state is None:
            raise BaguaError(f"module {module_name(module)!r} is not wrapped (bagua_shutdown() was called)")
        old = state.scheduler
        if old is not None:
            old.synchronize()
            old.detach()
        state.buckets = list(buckets)
        state.scheduler = BucketScheduler(state.buckets, state.process_group.worker, state.hooks.bucket_ready)


def register_module(module: torch.nn.Module, shutdown: Callable[[torch.nn.Module], None]) -> None:
    """Make ``module`` the one ``get_backend(module.bagua_module_name)`` serves, and have ``shutdown(module)`` run
    when the job's groups are destroyed (``with_bagua`` calls it)."""
    _modules[module_name(module)] = module
    _live[module] = shutdown


def shut_down_live_modules() -> None:
    """``bagua_shutdown()`` every module still wrapped, in the order they were wrapped (module doc); fault-tolerant
    mode's are left to its runtime."""
    for module, shutdown in list(_live.items()):
        state = state_of(module)
        if state is not None and not state.process_group.membership.on_quorum:
            shutdown(module)
    _live.clear()


before_destroy(shut_down_live_modules)


def get_backend(model_name: str) -> ModuleBackend:
    """The backend of the wrapped module named ``model_name`` (its ``bagua_module_name``)."""
    module = _modules.get(model_name)
    if module is None:
        known = ", ".join(sorted(_modules)) or "none"
        raise BaguaError(f"no module named {model_name!r} is wrapped by with_bagua in this process (wrapped: {known})")
    return ModuleBackend(module)
