"""The one attribute at which bagua keeps what it adds to an object of the user's: ``_bagua_state``.

What it holds depends on the object: a ``ModuleState`` on a wrapped module
(``bagua_core.lifecycle.module_state``); a ``ResumedState`` on a module a checkpoint was loaded into
before wrapping (``bagua_features.checkpoints.resume``; ``with_bagua`` replaces it); a :class:`TensorState`
on a tensor proxy; the fused optimizer's state on an optimizer (``bagua_contrib.fuse``). Read it with
:func:`get_state` and the kind expected, which returns None for any other kind or none at all.

Example::

    >>> t = proxies.mark(torch.zeros(3), "w", "model")
    >>> get_state(t, TensorState).name
    'w'
    >>> get_state(torch.zeros(3), TensorState) is None
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

__all__ = ["TensorBucket", "TensorState", "clear_state", "get_state", "set_state", "tensor_state_of"]

S = TypeVar("S")


def set_state(obj: object, state: object) -> None:
    """Keep ``state`` at ``obj``'s one bagua attribute (replacing what was there)."""
    obj._bagua_state = state  # type: ignore[attr-defined]


def get_state(obj: object, kind: type[S]) -> S | None:
    """``obj``'s bagua state if it is a ``kind``, else None (only the instance's own attribute counts)."""
    state = getattr(obj, "__dict__", {}).get("_bagua_state")
    return state if isinstance(state, kind) else None


def clear_state(obj: object) -> None:
    """Remove ``obj``'s bagua state, if any."""
    getattr(obj, "__dict__", {}).pop("_bagua_state", None)


class TensorBucket(Protocol):
    """What a tensor proxy asks of its bucket (``bagua_core.lifecycle.bucket.BaguaBucket``, which imports
    this module)."""

    def mark_ready(self, tensor: torch.Tensor, synchronize: bool = True) -> None: ...


@dataclass(slots=True, eq=False)
class TensorState:
    """What makes a tensor a bagua tensor proxy (``ensure_bagua_tensor``); the tensor's
    ``bagua_tensor_name`` and ``bagua_module_name`` read it."""

    name: str
    """The tensor's name (``bagua_tensor_name``): a parameter's name in its module, or one the algorithm gives."""
    module_name: str | None = None
    """The ``bagua_module_name`` of the module it belongs to, if any."""
    getter: Callable[[torch.Tensor], torch.Tensor] | None = None
    """Returns the effective tensor, the one communicated (a parameter's ``.grad``); None: the tensor itself."""
    setter: Callable[[torch.Tensor, torch.Tensor], None] | None = None
    """Replaces the effective tensor; None: ``tensor.set_(value)``."""
    bucket: TensorBucket | None = None
    """The bucket the tensor is in (set by the bucket; None when it is in none); readiness is the bucket's."""


def tensor_state_of(tensor: torch.Tensor) -> TensorState | None:
    """The tensor's proxy state, or None when it is not a bagua tensor (:func:`get_state`, inlined: it is
    asked per tensor in the hot paths)."""
    state = tensor.__dict__.get("_bagua_state")
    return state if isinstance(state, TensorState) else None
