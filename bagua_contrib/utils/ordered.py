"""Collectives issued by layers (SyncBatchNorm, MoE) during forward and backward.

Bucket operations of a wrapped module run on the process group's communication thread while backward
is still running; a collective issued from the autograd thread at the same time could interleave with
them differently on each rank. Layers therefore queue their collectives on the same thread and wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["default_group", "run_ordered"]


def default_group(process_group: Any = None) -> Any:
    """``process_group``, else bagua's default group, else ``None`` when bagua is not initialised."""
    if process_group is not None:
        return process_group
    import bagua_core

    if not bagua_core.is_initialized():
        return None
    from bagua_core.process_group import get_default_group

    return get_default_group()


def run_ordered(group: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` on ``group``'s communication thread, after the work queued before it; return
    its result (re-raising its error)."""
    return group.worker.submit(fn, *args).result()
