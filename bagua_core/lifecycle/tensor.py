"""Tensor proxies: the seed's ``bagua_*`` methods, added to ``torch.Tensor``.

A bagua tensor is a torch tensor marked for communication. Its *effective tensor* is what is
communicated: by default the tensor itself, or what ``getter_closure(tensor)`` returns (a
parameter's ``.grad``, say). ``setter_closure(tensor, value)`` replaces the effective tensor. What
marks it is one ``TensorState`` (``bagua_core.lifecycle.state``); ``bagua_tensor_name`` and
``bagua_module_name`` are properties over it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from bagua_core.lifecycle.state import TensorState, set_state, tensor_state_of

__all__ = ["is_sharded", "local_shard", "load_optimizer_state", "register_shards", "BaguaTensor", "install_tensor_methods"]


def is_dtensor(value: Any) -> bool:
    """Whether ``value`` is a ``DTensor`` (FSDP2's parameters, gradients and optimizer state). No tensor is one until
    ``torch.distributed.tensor`` was imported (``fully_shard`` imports it), so bagua does not import it itself: that
    import takes about 0.6 s, in every process of a job that shards nothing."""
    module = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(module, "DTensor", None)
    return dtensor is not None and isinstance(value, dtensor)


def ensure_bagua_tensor(
    self: torch.Tensor,
    name: str | None = None,
    module_name: str | None = None,
    getter_closure: Callable[[torch.Tensor], torch.Tensor] | None = None,
    setter_closure: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """Mark this tensor as a bagua tensor in place and return it.

    Example::

        >>> p = torch.nn.Parameter(torch.zeros(3))
        >>> p.ensure_bagua_tensor("w", "model", getter_closure=lambda t: t.grad,
        ...                       setter_closure=lambda t, v: setattr(t, "grad", v))
    """
    if name is None and tensor_state_of(self) is not None:
        return self
    set_state(self, TensorState(name if name is not None else f"tensor_{id(self)}", module_name, getter_closure,
                                setter_closure))
    return self


def to_bagua_tensor(
    self: torch.Tensor,
    name: str | None = None,
    module_name: str | None = None,
    getter_closure: Callable[[torch.Tensor], torch.Tensor] | None = None,
    setter_closure: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """A new bagua tensor sharing this tensor's storage (a Parameter stays a Parameter)."""
    if isinstance(self, torch.nn.Parameter):
        new = torch.nn.Parameter(self.data, requires_grad=self.requires_grad)
    else:
        new = self.detach()
    return ensure_bagua_tensor(new, name, module_name, getter_closure, setter_closure)


def is_bagua_tensor(self: torch.Tensor) -> bool:
    return tensor_state_of(self) is not None


def _getter(tensor: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
    state = tensor_state_of(tensor)
    return state.getter if state is not None else None


def local_shard(value: Any) -> Any:
    """``value`` as the tensor this rank holds: a ``DTensor`` (a parameter, gradient or optimizer state of a
    model sharded with FSDP2) as its local shard, any other value as it is.

    Example::

        >>> [local_shard(p).shape for p in sharded_model.parameters()]   # this rank's shards
    """
    if not is_dtensor(value):
        return value
    with torch.no_grad():  # DTensor's public accessor: the local tensor itself, not an autograd view of it
        return value.to_local()


def is_sharded(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a model sharded with FSDP2 (``DTensor`` parameters): the one check of it. For a
    wrapped module its state's layout says the same (``ModuleState.shard``).

    Example::

        >>> is_sharded(fully_shard(model, mesh=bagua.node_mesh()))
        True
    """
    return any(is_dtensor(p) for p in module.parameters())


def register_shards(module: torch.nn.Module) -> None:
    """Make every FSDP2 module inside ``module`` hold its sharded parameters (``FSDPModule.reshard()``: a no-op
    where they are). A forward without backward leaves the unsharded parameters registered where FSDP2 does not
    reshard after forward (its root, by default) until the next forward: bagua must not take those, whose
    storage FSDP2 frees, for the weights it keeps, copies or averages in the background.

    Example::

        >>> model(x_eval)                 # under no_grad: the root's parameters stay unsharded
        >>> register_shards(model)        # the sharded DTensor parameters again
    """
    if "torch.distributed.fsdp" not in sys.modules:  # nothing is fully_shard-ed: FSDP2 was never imported
        return
    from torch.distributed.fsdp import FSDPModule

    for sub in module.modules():
        if isinstance(sub, FSDPModule):
            sub.reshard()


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(state)`` where ``state``'s tensors may be local shards (a copy that crossed
    processes or was taken with :func:`local_shard`): a plain tensor with the local shard's shape of a
    ``DTensor`` parameter is wrapped as that parameter's ``DTensor`` (its mesh, placements, global shape)
    first, so the optimizer steps on ``DTensor`` tensors as before; scalars (step counts) stay plain.

    Example::

        >>> saved = optimizer.state_dict()
        >>> saved["state"] = {i: {k: local_shard(v) for k, v in s.items()} for i, s in saved["state"].items()}
        >>> load_optimizer_state(optimizer, saved)      # the optimizer's state is DTensors again
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    wrapped = {}
    for index, entries in state["state"].items():
        param = params[int(index)]
        if not is_dtensor(param):
            wrapped[index] = entries
            continue
        shape = param.to_local().shape
        wrapped[index] = {
            key: type(param).from_local(value, param.device_mesh, param.placements, run_check=False, shape=param.shape,
                                    stride=param.stride())
            if isinstance(value, torch.Tensor) and not is_dtensor(value) and value.dim() > 0
            and value.shape == shape else value
            for key, value in entries.items()}
    optimizer.load_state_dict({**state, "state": wrapped})


def bagua_getter_closure(self: torch.Tensor) -> torch.Tensor:
    """The effective tensor; for a ``DTensor`` (a model sharded with FSDP2) its local shard: bagua
    communicates each rank's own shard with the ranks holding the same one (``bagua_core.module.sharded``)."""
    getter = _getter(self)
    return local_shard(getter(self) if getter is not None else self)


def bagua_setter_closure(self: torch.Tensor, tensor: torch.Tensor) -> None:
    """Replace the effective tensor by ``tensor``."""
    state = tensor_state_of(self)
    setter = state.setter if state is not None else None
    if setter is None:
        with torch.no_grad():
            self.set_(tensor)
    else:
        setter(self, tensor)


def bagua_set_storage(self: torch.Tensor, storage: torch.UntypedStorage | torch.TypedStorage, storage_offset: int = 0) -> None:
    """Make the effective tensor a view of ``storage`` at ``storage_offset`` (in elements), keeping its
    values, shape and strides. Flattened buckets use it to place tensors in one contiguous buffer."""
    effective = self.bagua_getter_closure()
    if isinstance(storage, torch.TypedStorage):
        storage = storage.untyped()
    with torch.no_grad():
        view = torch.empty(0, dtype=effective.dtype, device=effective.device)
        view.set_(storage, storage_offset, effective.shape, effective.stride())
        if view.data_ptr() != effective.data_ptr():
            view.copy_(effective)
        if _getter(self) is None:
            self.set_(storage, storage_offset, effective.shape, effective.stride())
            return
    self.bagua_setter_closure(view)


def bagua_ensure_grad(self: torch.Tensor) -> torch.Tensor:
    """Give the tensor a zero gradient if it has none; return it."""
    if self.grad is None:
        with torch.no_grad():
            self.grad = torch.zeros_like(self, memory_format=torch.preserve_format)
    return self


def _bucket_of(tensor: torch.Tensor):
    state = tensor_state_of(tensor)
    if state is None or state.bucket is None:
        name = state.name if state is not None else "?"
        raise RuntimeError(f"bagua tensor {name!r} is not in a bucket")
    return state.bucket


def bagua_mark_communication_ready(self: torch.Tensor) -> None:
    """Tell the tensor's bucket that its effective tensor is ready to be communicated. On CUDA the
    bucket's communication waits for an event on the current stream (recorded when the bucket is
    ready), so it never reads the tensor before the work queued to produce it has run."""
    _bucket_of(self).mark_ready(self)


def bagua_mark_communication_ready_without_synchronization(self: torch.Tensor) -> None:
    """Like :func:`bagua_mark_communication_ready`, without waiting for the current CUDA stream: the
    caller guarantees that the tensor is written before the bucket's communication reads it (e.g. it
    synchronised the device)."""
    _bucket_of(self).mark_ready(self, synchronize=False)


def _proxy_state(tensor: torch.Tensor, attribute: str) -> TensorState:
    state = tensor_state_of(tensor)
    if state is None:
        raise AttributeError(f"{attribute}: this tensor is not a bagua tensor (call ensure_bagua_tensor first)")
    return state


def _get_tensor_name(self: torch.Tensor) -> str:
    return _proxy_state(self, "bagua_tensor_name").name


def _set_tensor_name(self: torch.Tensor, name: str) -> None:
    _proxy_state(self, "bagua_tensor_name").name = name


def _get_module_name(self: torch.Tensor) -> str | None:
    return _proxy_state(self, "bagua_module_name").module_name


def _set_module_name(self: torch.Tensor, module_name: str | None) -> None:
    _proxy_state(self, "bagua_module_name").module_name = module_name


def bagua_backend_tensor(self: torch.Tensor) -> torch.Tensor:
    """The tensor the backend communicates: the effective tensor (this project has no separate
    backend object; its ``data_ptr()`` is the effective tensor's, as the original's checks expect)."""
    return self.bagua_getter_closure()


class BaguaTensor:
    """The methods bagua adds to ``torch.Tensor`` (the original's ``BaguaTensor`` patch class): every
    tensor has them once ``bagua_core`` is imported.

    Example::

        >>> p = torch.nn.Parameter(torch.zeros(3)).ensure_bagua_tensor("w", "model")
        >>> BaguaTensor.is_bagua_tensor(p)
        True
    """

    bagua_tensor_name = property(_get_tensor_name, _set_tensor_name, doc="The tensor's name (a bagua tensor's).")
    bagua_module_name = property(_get_module_name, _set_module_name,
                                 doc="The ``bagua_module_name`` of the module the bagua tensor belongs to, or None.")
    ensure_bagua_tensor = ensure_bagua_tensor
    to_bagua_tensor = to_bagua_tensor
    is_bagua_tensor = is_bagua_tensor
    bagua_getter_closure = bagua_getter_closure
    bagua_setter_closure = bagua_setter_closure
    bagua_set_storage = bagua_set_storage
    bagua_ensure_grad = bagua_ensure_grad
    bagua_backend_tensor = bagua_backend_tensor
    bagua_mark_communication_ready = bagua_mark_communication_ready
    bagua_mark_communication_ready_without_synchronization = bagua_mark_communication_ready_without_synchronization


def install_tensor_methods() -> None:
    for name, fn in vars(BaguaTensor).items():
        if not name.startswith("__"):
            setattr(torch.Tensor, name, fn)


install_tensor_methods()
