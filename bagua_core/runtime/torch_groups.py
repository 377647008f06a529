"""What bagua asks of a torch process group, asked of the group object itself.

torch's functions that take a group and a *global* rank (``dist.get_rank(group)``, ``get_group_rank``,
``get_global_rank``, ``dist.isend(t, dst)``, ``dist.broadcast(t, src)``, ...) look the group up in torch's
tables, which know only the groups torch made (``init_process_group``, ``new_group``). bagua runs its
collectives on other groups too: fault-tolerant mode's ``ManagedGroup`` is a ``ProcessGroup`` subclass that
torch never registered. So the core names peers by their rank *in the group* (``group_dst=`` /
``group_src=``, which torch hands to the group without a lookup) and asks the group for its rank and size
(``group.rank()``, ``group.size()``). Only the backend's name needs torch's tables for the groups torch made:
their device -> backend map (``"cpu:gloo,cuda:nccl"``) is nowhere else public; a group torch did not make
names its backend itself (``group.name()``).

Example::

    >>> backend_of(dist.group.WORLD), backend_of(managed)      # with the default choice on a GPU host
    ('cpu:gloo,cuda:nccl', 'gloo')
    >>> rank_in(managed), size_of(managed)
    (1, 3)
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

__all__ = ["backend_of", "rank_in", "size_of"]


def _or_world(group: Any) -> Any:
    return dist.group.WORLD if group is None else group


def backend_of(group: Any) -> str:
    """The backend of ``group`` (None: the whole job's) as ``dist.get_backend`` names it: ``"gloo"``, or each
    device's (``"cpu:gloo,cuda:nccl"``). A group torch's tables do not hold (a ``ProcessGroup`` subclass
    made outside ``new_group``, such as fault-tolerant mode's ``ManagedGroup``) answers ``group.name()``."""
    group = _or_world(group)
    try:
        return str(dist.get_backend(group))
    except ValueError:  # not made by torch: the group names its backend itself
        return str(group.name())


def rank_in(group: Any) -> int:
    """This process's rank in ``group`` (None: the whole job), asked of the group (no table lookup)."""
    return _or_world(group).rank()


def size_of(group: Any) -> int:
    """The number of ranks of ``group`` (None: the whole job), asked of the group."""
    return _or_world(group).size()
