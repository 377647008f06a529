"""``DistributedDataParallel``: a ``torch.nn.parallel.DistributedDataParallel``-compatible wrapper
around ``with_bagua`` (the original's ``bagua.torch_api.data_parallel.DistributedDataParallel``).

The wrapped module is ``.module``; it is wrapped in place with ``with_bagua``, so it is also ``.inner``
(what the original's algorithms receive). Communication is the algorithm's, exactly as with
``with_bagua``; ``no_sync()`` accumulates gradients locally; ``find_unused_parameters=True`` leaves the
parameters that received no gradient on any rank out of ``bagua_build_params()`` and the buckets (see
:mod:`bagua_core.module.unused_params`). ``bucket_cap_mb`` sets the algorithm's bucket size when it has
a tunable one. Buffers are broadcast from rank 0 when wrapping (torch DDP also re-broadcasts them before
every forward; the original did not).

Example::

    >>> ddp = DistributedDataParallel(model, optimizers=[optimizer], algorithm=GradientAllReduceAlgorithm())
    >>> loss = ddp(x).sum(); loss.backward(); optimizer.step()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

from bagua_core.lifecycle.module_state import ModuleState, build_params, params_and_buffers_to_ignore, state_of
from bagua_core.module.bagua_module import no_sync, reset
from bagua_core.selection.config import resolve_algorithm
from bagua_core.runtime.exceptions import BaguaConfigError
from bagua_core.runtime.process_group import BaguaProcessGroup, bagua_group_of, get_default_group

__all__ = ["DistributedDataParallel", "to_bagua_process_group"]


def to_bagua_process_group(process_group: Any = None):
    """The bagua group for ``process_group``: the default group for None, a ``BaguaProcessGroup`` as it
    is, a torch process group's through ``bagua_group_of`` (collective the first time)."""
    if process_group is None:
        return get_default_group()
    if isinstance(process_group, BaguaProcessGroup):
        return process_group
    if isinstance(process_group, dist.ProcessGroup):
        return bagua_group_of(process_group)
    raise BaguaConfigError(
        f"process_group must be None, a torch.distributed ProcessGroup or a BaguaProcessGroup, got "
        f"{type(process_group).__name__}"
    )


def _wrapped_state(module: torch.nn.Module) -> ModuleState:
    state = state_of(module)
    if state is None:
        raise BaguaConfigError("the module of this DistributedDataParallel is no longer wrapped (bagua_shutdown() "
                               "was called)")
    return state


class DistributedDataParallel(torch.nn.Module):
    """Torch-DDP-compatible wrapper (arguments as torch 1.9's DDP, then the algorithm's)."""

    def __init__(
        self,
        module: torch.nn.Module,
        device_ids: Sequence[int | torch.device] | None = None,
        output_device: int | torch.device | None = None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group: Any = None,
        bucket_cap_mb: float = 25,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = True,
        optimizers: Sequence[torch.optim.Optimizer] = (),
        algorithm: Any = None,
    ) -> None:
        super().__init__()
        if not any(p.requires_grad for p in module.parameters()):
            raise BaguaConfigError("DistributedDataParallel is not needed when a module has no parameter that "
                                   "requires a gradient")
        if device_ids is not None and len(device_ids) > 1:
            raise BaguaConfigError(f"device_ids can only be None or contain a single element, got {list(device_ids)}")
        if device_ids and not torch.cuda.is_available():
            raise BaguaConfigError(
                f"device_ids={list(device_ids)} names CUDA devices, but CUDA is not available here: on CPU leave "
                "device_ids=None (the module and its inputs stay where they are)"
            )
        device_types = {p.device.type for p in module.parameters()}
        if len(device_types) != 1:
            raise BaguaConfigError(f"the module's parameters must be on one type of device, found {sorted(device_types)}")
        if not broadcast_buffers:
            raise BaguaConfigError("broadcast_buffers=False is not supported (as in the original): buffers are "
                                   "broadcast from rank 0 when wrapping")
        self.module = module
        self.dim = dim
        self.device = next(module.parameters()).device
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        declaration = resolve_algorithm(algorithm, list(optimizers))
        module.with_bagua(list(optimizers), declaration,  # None: with_bagua's own choice (a sharded model's too)
                          process_group=None if process_group is None else to_bagua_process_group(process_group),
                          do_flatten=gradient_as_bucket_view)
        impl = _wrapped_state(module).impl
        if bucket_cap_mb != 25 and not impl.bucket_size:
            impl.bucket_size = int(bucket_cap_mb * 1024 * 1024)
            reset(module)
        _wrapped_state(module).unused.enabled = find_unused_parameters

    @property
    def inner(self) -> torch.nn.Module:
        """The wrapped module (it carries bagua's state: what the original's algorithm hooks receive)."""
        return self.module

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)

    @property
    def require_backward_grad_sync(self) -> bool:
        """Whether backward communicates (False inside :meth:`no_sync`, and once the module is shut down)."""
        state = state_of(self.module)
        return state is not None and state.sync_enabled

    @require_backward_grad_sync.setter
    def require_backward_grad_sync(self, value: bool) -> None:
        _wrapped_state(self.module).sync_enabled = bool(value)

    @property
    def parameters_to_ignore(self) -> list[str]:
        """The names in the module's ``_bagua_params_and_buffers_to_ignore``."""
        return params_and_buffers_to_ignore(self.module)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally inside the block; the first backward after it communicates."""
        with no_sync(self.module):
            yield

    @property
    def bagua_algorithm(self):
        """The algorithm's implementation (reified from ``algorithm``)."""
        return _wrapped_state(self.module).impl

    @property
    def bagua_optimizers(self) -> list[torch.optim.Optimizer]:
        return _wrapped_state(self.module).optimizers

    @property
    def bagua_buckets(self) -> list:
        return _wrapped_state(self.module).buckets

    def bagua_build_params(self) -> list[tuple[str, torch.nn.Parameter]]:
        return build_params(self.module)
