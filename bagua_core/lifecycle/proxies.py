"""Tensor proxies: the core's record that a torch tensor is communicated, and the functions that read it.

A tensor becomes a proxy with :func:`mark`, which keeps one ``TensorState`` (``bagua_core.lifecycle.state``) at
the tensor's one bagua attribute: its name, the module it belongs to, and how to reach its *effective tensor*,
the one communicated (by default the tensor itself; with a ``getter``, what it returns, a parameter's ``.grad``
say). Nothing is added to ``torch.Tensor``: buckets, hooks and algorithms call these functions
(``bagua_core.api.tensors``). The original's methods (``tensor.ensure_bagua_tensor(...)``,
``tensor.bagua_getter_closure()``, ...) are thin adapters over them, added by ``bagua.torch_api``.

Example::

    >>> from bagua_core.api import tensors
    >>> p = torch.nn.Parameter(torch.zeros(3))
    >>> p = tensors.mark(p, "w", "model", getter=lambda t: t.grad, setter=lambda t, v: setattr(t, "grad", v))
    >>> tensors.name_of(p), tensors.effective(tensors.ensure_grad(p)).shape
    ('w', torch.Size([3]))
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bagua_core.lifecycle.state import TensorBucket, TensorState, set_state, tensor_state_of
from bagua_core.lifecycle.tensor import local_shard

__all__ = ["bucket_of", "effective", "ensure_grad", "is_marked", "local_shard", "mark", "mark_ready",
           "module_name_of", "name_of", "set_effective", "set_storage", "state"]

Getter = Callable[[torch.Tensor], torch.Tensor]
Setter = Callable[[torch.Tensor, torch.Tensor], None]


def mark(tensor: torch.Tensor, name: str | None = None, module_name: str | None = None,
         getter: Getter | None = None, setter: Setter | None = None) -> torch.Tensor:
    """Make ``tensor`` a proxy in place and return it. ``name`` None keeps an existing proxy as it is (else
    names it ``tensor_<id>``); ``getter(tensor)`` returns the effective tensor (None: the tensor itself),
    ``setter(tensor, value)`` replaces it (None: ``tensor.set_(value)``)."""
    if name is None and tensor_state_of(tensor) is not None:
        return tensor
    set_state(tensor, TensorState(name if name is not None else f"tensor_{id(tensor)}", module_name, getter, setter))
    return tensor


def is_marked(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a proxy (:func:`mark`)."""
    return tensor_state_of(tensor) is not None


def state(tensor: torch.Tensor, what: str = "this") -> TensorState:
    """The proxy's ``TensorState``; ``AttributeError`` naming ``what`` asked for it when ``tensor`` is no proxy."""
    found = tensor_state_of(tensor)
    if found is None:
        raise AttributeError(f"{what}: the tensor is not a bagua tensor (mark it with bagua_core.api.tensors.mark)")
    return found


def name_of(tensor: torch.Tensor) -> str:
    """The proxy's name."""
    return state(tensor, "name_of").name


def module_name_of(tensor: torch.Tensor) -> str | None:
    """The name of the module the proxy belongs to, or None (also for a tensor that is no proxy)."""
    found = tensor_state_of(tensor)
    return found.module_name if found is not None else None


def effective(tensor: torch.Tensor) -> torch.Tensor:
    """The effective tensor (None where the getter returns None, a gradient not made yet); for a ``DTensor`` (a
    model sharded with FSDP2) its local shard: bagua communicates each rank's own shard with the ranks holding
    the same one (``bagua_core.module.sharded``)."""
    found = tensor_state_of(tensor)
    getter = found.getter if found is not None else None
    return local_shard(getter(tensor) if getter is not None else tensor)


def set_effective(tensor: torch.Tensor, value: torch.Tensor) -> None:
    """Replace the effective tensor by ``value``."""
    found = tensor_state_of(tensor)
    setter = found.setter if found is not None else None
    if setter is None:
        with torch.no_grad():
            tensor.set_(value)
    else:
        setter(tensor, value)


def set_storage(tensor: torch.Tensor, storage: torch.UntypedStorage | torch.TypedStorage,
                storage_offset: int = 0) -> None:
    """Make the effective tensor a view of ``storage`` at ``storage_offset`` (in elements), keeping its values,
    shape and strides. Flattened buckets use it to place tensors in one contiguous buffer."""
    current = effective(tensor)
    if isinstance(storage, torch.TypedStorage):
        storage = storage.untyped()
    found = tensor_state_of(tensor)
    with torch.no_grad():
        view = torch.empty(0, dtype=current.dtype, device=current.device)
        view.set_(storage, storage_offset, current.shape, current.stride())
        if view.data_ptr() != current.data_ptr():
            view.copy_(current)
        if found is None or found.getter is None:
            tensor.set_(storage, storage_offset, current.shape, current.stride())
            return
    set_effective(tensor, view)


def ensure_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Give ``tensor`` a zero gradient if it has none; return it."""
    if tensor.grad is None:
        with torch.no_grad():
            tensor.grad = torch.zeros_like(tensor, memory_format=torch.preserve_format)
    return tensor


def bucket_of(tensor: torch.Tensor) -> TensorBucket:
    """The bucket the proxy is in (``RuntimeError`` when it is in none)."""
    found = tensor_state_of(tensor)
    if found is None or found.bucket is None:
        raise RuntimeError(f"bagua tensor {found.name if found is not None else '?'!r} is not in a bucket")
    return found.bucket


def mark_ready(tensor: torch.Tensor, synchronize: bool = True) -> None:
    """Tell the proxy's bucket that its effective tensor is ready to be communicated. On CUDA the bucket's
    communication waits for an event on the current stream (recorded when the bucket is ready), so it never
    reads the tensor before the work queued to produce it has run; ``synchronize=False`` leaves that out (the
    caller guarantees the tensor is written, e.g. it synchronised the device)."""
    bucket_of(tensor).mark_ready(tensor, synchronize=synchronize)
