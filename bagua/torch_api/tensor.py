"""``BaguaTensor``: the original's ``bagua_*`` methods of ``torch.Tensor``, and of ``ProcessGroup``, for code written
for the original.

Importing ``bagua.torch_api`` adds them (:func:`install`); ``import bagua_core`` adds nothing to either class. Each
method is a thin adapter over the core's tensor proxies (``bagua_core.lifecycle.proxies``, for plugins
``bagua_core.api.tensors``) or its groups (``bagua_core.runtime.process_group.bagua_group_of``).

Example::

    >>> import bagua.torch_api as bagua
    >>> p = torch.nn.Parameter(torch.zeros(3)).ensure_bagua_tensor("w", "model")
    >>> p.bagua_tensor_name, BaguaTensor.is_bagua_tensor(p)
    ('w', True)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from bagua_core.lifecycle import proxies
from bagua_core.runtime.exceptions import BaguaError
from bagua_core.runtime.process_group import BaguaProcessGroup, bagua_group_of, torch_to_bagua_pg_map

__all__ = ["BaguaTensor", "install"]

Getter = Callable[[torch.Tensor], torch.Tensor]
Setter = Callable[[torch.Tensor, torch.Tensor], None]


def _set_tensor_name(tensor: torch.Tensor, name: str) -> None:
    proxies.state(tensor, "bagua_tensor_name").name = name


def _set_module_name(tensor: torch.Tensor, module_name: str | None) -> None:
    proxies.state(tensor, "bagua_module_name").module_name = module_name


class BaguaTensor:
    """The methods ``bagua.torch_api`` adds to ``torch.Tensor`` (the original's ``BaguaTensor`` patch class)."""

    bagua_tensor_name = property(lambda self: proxies.state(self, "bagua_tensor_name").name, _set_tensor_name,
                                 doc="The tensor's name (a bagua tensor's).")
    bagua_module_name = property(lambda self: proxies.state(self, "bagua_module_name").module_name,
                                 _set_module_name,
                                 doc="The ``bagua_module_name`` of the module the bagua tensor belongs to, or None.")

    def ensure_bagua_tensor(self: torch.Tensor, name: str | None = None, module_name: str | None = None,
                            getter_closure: Getter | None = None, setter_closure: Setter | None = None) -> torch.Tensor:
        """Mark this tensor as a bagua tensor in place and return it (``proxies.mark``)."""
        return proxies.mark(self, name, module_name, getter_closure, setter_closure)

    def to_bagua_tensor(self: torch.Tensor, name: str | None = None, module_name: str | None = None,
                        getter_closure: Getter | None = None, setter_closure: Setter | None = None) -> torch.Tensor:
        """A new bagua tensor sharing this tensor's storage (a Parameter stays a Parameter)."""
        if isinstance(self, torch.nn.Parameter):
            new = torch.nn.Parameter(self.data, requires_grad=self.requires_grad)
        else:
            new = self.detach()
        return proxies.mark(new, name, module_name, getter_closure, setter_closure)

    def is_bagua_tensor(self: torch.Tensor) -> bool:
        return proxies.is_marked(self)

    def bagua_getter_closure(self: torch.Tensor) -> torch.Tensor:
        """The effective tensor (``proxies.effective``)."""
        return proxies.effective(self)

    def bagua_setter_closure(self: torch.Tensor, tensor: torch.Tensor) -> None:
        """Replace the effective tensor by ``tensor``."""
        proxies.set_effective(self, tensor)

    def bagua_set_storage(self: torch.Tensor, storage: torch.UntypedStorage | torch.TypedStorage,
                          storage_offset: int = 0) -> None:
        """Make the effective tensor a view of ``storage`` at ``storage_offset`` (in elements)."""
        proxies.set_storage(self, storage, storage_offset)

    def bagua_ensure_grad(self: torch.Tensor) -> torch.Tensor:
        """Give the tensor a zero gradient if it has none; return it."""
        return proxies.ensure_grad(self)

    def bagua_backend_tensor(self: torch.Tensor) -> torch.Tensor:
        """The tensor the backend communicates: the effective tensor (its ``data_ptr()`` is the effective
        tensor's, as the original's checks expect)."""
        return proxies.effective(self)

    def bagua_mark_communication_ready(self: torch.Tensor) -> None:
        """Tell the tensor's bucket that its effective tensor is ready (``proxies.mark_ready``)."""
        proxies.mark_ready(self)

    def bagua_mark_communication_ready_without_synchronization(self: torch.Tensor) -> None:
        """Like :meth:`bagua_mark_communication_ready`, without waiting for the current CUDA stream."""
        proxies.mark_ready(self, synchronize=False)


def _bagua_patch(self: dist.ProcessGroup, stream: object = None) -> dist.ProcessGroup:
    """``torch_group.bagua_patch()``: make (once) the bagua group of this torch group, reachable as
    ``torch_group.bagua_pg``; collective over the whole job the first time. Returns the torch group."""
    bagua_group_of(self, stream)
    return self


def _bagua_pg(self: dist.ProcessGroup) -> BaguaProcessGroup:
    if self not in torch_to_bagua_pg_map:
        raise BaguaError("this torch process group has no bagua group yet: call its bagua_patch() first")
    return torch_to_bagua_pg_map[self]


PROCESS_GROUP_METHODS = {
    "bagua_patch": _bagua_patch,
    "bagua_pg": property(_bagua_pg),
    "bagua_get_global_communicator": lambda self: _bagua_pg(self).get_global_communicator(),
    "bagua_get_inter_node_communicator": lambda self: _bagua_pg(self).get_inter_node_communicator(),
    "bagua_get_intra_node_communicator": lambda self: _bagua_pg(self).get_intra_node_communicator(),
}
"""The original's methods of ``torch.distributed.ProcessGroup``."""


def install() -> None:
    """Add the original's methods to ``torch.Tensor`` and ``ProcessGroup`` (``import bagua.torch_api`` does)."""
    for name, member in vars(BaguaTensor).items():
        if not name.startswith("__"):
            setattr(torch.Tensor, name, member)
    for name, member in PROCESS_GROUP_METHODS.items():
        setattr(dist.ProcessGroup, name, member)
