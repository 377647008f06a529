"""What ``destroy_process_group`` does so that torch's process groups are destroyed then, not at exit.

A gloo process group whose Python object outlives ``destroy_process_group`` keeps its worker threads
running into interpreter finalization. Such a thread releases each finished collective's tensors just
after the rank's ``wait()`` has returned; when a rank exits right after its last collective, that
release can come after finalization began, and taking the GIL back then kills the thread by
unwinding through C++, which aborts the finished process (exit -6, "terminate called without an
active exception"; CI saw it on about one run in ten of a two-rank script). Destroyed with
``destroy_process_group``, the group joins its threads first.

Two references outlive it unless dropped here:

- bagua's own groups and communicators (a wrapped module is kept alive by its hooks' reference cycle
  through C++, which the garbage collector cannot break); ``BaguaProcessGroup.release`` drops them.
- ``torch.distributed.nn.functional``: its functions default to ``group=group.WORLD``, evaluated on
  its first import. torch imports it lazily (building the first optimizer imports ``torch._dynamo``,
  which imports it), so after ``init_process_group`` those defaults hold the default group forever.
  :func:`forget_group_defaults` resets them to ``None``, what a fresh import before
  ``init_process_group`` gives (the default group of the moment).

After a failure the groups are kept alive instead (:func:`keep`): destroying one waits for its
collectives in flight, which may wait for a peer that is gone.

Example::

    >>> forget_group_defaults([dist.group.WORLD])   # destroy_process_group, before torch's destroy
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable

__all__ = ["forget_group_defaults", "keep"]

_MODULES_WITH_GROUP_DEFAULTS = ("torch.distributed.nn.functional",)
_kept: list[object] = []


def forget_group_defaults(groups: Iterable[object]) -> int:
    """Replace each of ``groups`` with ``None`` in the default arguments of torch's functions that
    captured it; return how many defaults were replaced."""
    groups = [g for g in groups if g is not None]
    replaced = 0
    if not groups:
        return replaced
    for name in _MODULES_WITH_GROUP_DEFAULTS:
        module = sys.modules.get(name)
        if module is None:
            continue
        for fn in vars(module).values():
            if not isinstance(fn, types.FunctionType) or fn.__module__ != name or not fn.__defaults__:
                continue
            hits = sum(1 for d in fn.__defaults__ if any(d is g for g in groups))
            if hits:
                fn.__defaults__ = tuple(None if any(d is g for g in groups) else d for d in fn.__defaults__)
                replaced += hits
    return replaced


def keep(groups: Iterable[object]) -> None:
    """Keep these torch groups alive to the end of the process (after a failure: their destruction
    would wait for collectives that may never finish)."""
    _kept.extend(g for g in groups if g is not None)
