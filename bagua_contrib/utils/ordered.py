"""Collectives issued by layers (SyncBatchNorm, MoE) during forward and backward.

Bucket operations of a wrapped module run on the process group's communication thread while backward
is still running; a collective issued from the autograd thread at the same time could interleave with
them differently on each rank. Layers therefore queue their collectives on the same thread and wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["GroupRef", "default_group", "run_ordered"]


def default_group(process_group: Any = None) -> Any:
    """``process_group``, else bagua's default group, else ``None`` when bagua is not initialised."""
    if process_group is not None:
        return process_group
    import bagua_core

    if not bagua_core.is_initialized():
        return None
    from bagua_core.runtime.process_group import get_default_group

    return get_default_group()


def run_ordered(group: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` on ``group``'s communication thread, after the work queued before it; return
    its result (re-raising its error)."""
    return group.worker.submit(fn, *args).result()


class GroupRef:
    """A process group held by a module: shared (not copied) by ``copy.deepcopy``, dropped by pickling
    (an unpickled module uses the default group)."""

    def __init__(self, group: Any = None) -> None:
        self.group = group

    def get(self) -> Any:
        return default_group(self.group)

    def __deepcopy__(self, memo: dict) -> GroupRef:
        return self

    def __reduce__(self) -> tuple:
        return (GroupRef, ())
