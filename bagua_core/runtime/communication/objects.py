"""Collectives on picklable Python objects."""

from __future__ import annotations

import torch.distributed as dist

from bagua_core.runtime.communication.common import resolve_comm
from bagua_core.runtime.communication.communicator import BaguaCommunicator

__all__ = ["broadcast_object"]


def broadcast_object(obj: object, src: int = 0, comm: BaguaCommunicator | None = None) -> object:
    """Return rank ``src``'s ``obj`` on every rank of ``comm`` (pickled; only for trusted peers). Outside
    the communicator ``obj`` is returned unchanged.

    Example::

        >>> config = broadcast_object({"lr": 0.1} if rank == 0 else None)   # rank 0's dict everywhere
    """
    comm = resolve_comm(comm)
    if comm is None:
        return obj
    payload = [obj]
    dist.broadcast_object_list(payload, group=comm.torch_group, group_src=comm.group_rank(src))
    return payload[0]
