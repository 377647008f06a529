"""Aborting this process's communicators after a failure.

NCCL process groups are aborted (``ProcessGroup.abort``), which makes their pending collectives
return with an error instead of waiting for the timeout. Gloo has no abort that reaches the peers
(its ``abort`` leaves the connections open), so on gloo the peers' pending collectives fail when the
failing process exits and its connections close, and the watchdog (:mod:`bagua_core.runtime.failure.watchdog`)
makes a rank that is not in a collective raise.

Example::

    >>> abort_process_groups()      # after report() / learn(): NCCL collectives in flight return
"""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["abort_process_groups"]


def _process_groups() -> list:
    try:
        return list(dist.distributed_c10d._world.pg_map)
    except Exception:  # torch.distributed is not initialized or its internals moved
        return []


def abort_process_groups() -> int:
    """Abort every NCCL (or mixed ``cpu:gloo,cuda:nccl``) process group of this process; return how
    many were aborted. Never raises."""
    aborted = 0
    for group in _process_groups():
        try:
            if "nccl" in str(dist.get_backend(group)):
                group.abort()
                aborted += 1
        except Exception:  # already destroyed, or a backend without abort
            continue
    return aborted
