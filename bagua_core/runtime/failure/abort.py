"""Aborting this process's communicators after a failure.

NCCL process groups are aborted (``ProcessGroup.abort``), which makes their pending collectives
return with an error instead of waiting for the timeout. Gloo has no abort that reaches the peers
(its ``abort`` leaves the connections open), so on gloo the peers' pending collectives fail when the
failing process exits and its connections close, and the watchdog (:mod:`bagua_core.runtime.failure.watchdog`)
makes a rank that is not in a collective raise.

The groups aborted are the default group and those bagua issues collectives on: each is handed to
:func:`watch` when bagua makes it (``BaguaProcessGroup.new_torch_group``) or is given it (a
``BaguaCommunicator``'s group: one of the user's through ``from_torch_group``, a quorum's). They are
held weakly: a group destroyed and dropped is no longer aborted. Groups of the user's that bagua never
saw are left alone.

Example::

    >>> watch(torch.distributed.new_group([0, 1]))
    >>> abort_process_groups()      # after report() / learn(): NCCL collectives in flight return
"""

from __future__ import annotations

import weakref

import torch.distributed as dist

from bagua_core.runtime.torch_groups import backend_of

__all__ = ["abort_process_groups", "watch"]

_watched: weakref.WeakSet = weakref.WeakSet()


def watch(group: dist.ProcessGroup | None) -> None:
    """Abort ``group`` too when this process fails or learns of a failure (None, or torch's mark of a group
    this process is not in: nothing to watch)."""
    if isinstance(group, dist.ProcessGroup):
        _watched.add(group)


def _process_groups() -> list:
    groups = list(_watched)
    world = dist.group.WORLD if dist.is_initialized() else None
    if world is not None and world not in groups:
        groups.insert(0, world)
    return groups


def abort_process_groups() -> int:
    """Abort every NCCL (or mixed ``cpu:gloo,cuda:nccl``) process group watched (and the default group);
    return how many were aborted. Never raises."""
    aborted = 0
    for group in _process_groups():
        try:
            if "nccl" in backend_of(group):
                group.abort()
                aborted += 1
        except Exception:  # already destroyed, or a backend without abort
            continue
    return aborted
