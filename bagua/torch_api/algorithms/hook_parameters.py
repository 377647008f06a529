"""The module parameter of the algorithm hooks answers to both names the original documented, on the original's
classes (``bagua.torch_api.algorithms``).

The original's API named it ``bagua_module`` (``init_tensors(self, bagua_module)``, ``abort(self,
bagua_module)``, ..., the name this project's impls write) and its 0.9 API pages ``bagua_ddp``. An impl of the
original's classes may write either; a keyword call may use either: ``impl.init_operations(bagua_ddp=m,
bucket=b)`` reaches a hook written with ``bagua_module`` and the other way round. Positional calls (what the core
makes) are untouched. The written signature stays what ``inspect.signature`` reports. This project's own impls
(``bagua_core.api.AlgorithmImpl`` and the built-ins) are not adapted: their methods are what they write.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["MODULE_PARAMETER_NAMES", "HOOKS_TAKING_THE_MODULE", "accept_either_module_name", "adapt_hooks"]

MODULE_PARAMETER_NAMES = ("bagua_module", "bagua_ddp")
"""This project's (and the original's API) name first, the original 0.9 API pages' second."""

HOOKS_TAKING_THE_MODULE = (
    "init_tensors", "init_operations", "init_forward_pre_hook", "init_backward_hook", "init_bucket_ready_hook",
    "init_post_backward_hook", "init_post_optimizer_step_hook", "init_step_end_hook",
    "communicates_after_optimizer_step", "shutdown", "abort", "resume", "quiesce", "round_syncs", "round_ends",
    "warming_up",
)


def accept_either_module_name(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (a method whose first parameter after ``self`` is one of
    :data:`MODULE_PARAMETER_NAMES`) made to accept the other name as a keyword too; anything else as is."""
    if getattr(function, "bagua_module_parameter_names", None):
        return function
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return function
    if len(names) < 2 or names[1] not in MODULE_PARAMETER_NAMES:
        return function
    written = names[1]
    other = next(name for name in MODULE_PARAMETER_NAMES if name != written)

    @functools.wraps(function)
    def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        if other in kwargs:
            if written in kwargs or args:
                raise TypeError(f"{function.__qualname__}() got the module twice: pass it once, as "
                                f"{written}= or {other}= (both name the same parameter)")
            kwargs[written] = kwargs.pop(other)
        return function(self, *args, **kwargs)

    hook.bagua_module_parameter_names = (written, other)  # type: ignore[attr-defined]
    return hook


def adapt_hooks(cls: type, inherited: bool = False) -> None:
    """Apply :func:`accept_either_module_name` to the hooks ``cls`` defines itself (``inherited``: and to those it
    inherits, as its own: a class of the original's API over a built-in impl)."""
    for name in HOOKS_TAKING_THE_MODULE:
        raw = getattr(cls, name, None) if inherited else cls.__dict__.get(name)
        if inspect.isfunction(raw) and not getattr(raw, "bagua_module_parameter_names", None):
            setattr(cls, name, accept_either_module_name(raw))
