"""``ModuleState``: everything bagua keeps on a wrapped module besides the original's documented
attributes, in one object at the module's one bagua attribute (``bagua_core.lifecycle.state``).

``with_bagua`` creates it (a re-wrap creates a new one, keeping ``find_unused_parameters`` and the
autotuner), the hooks and the wings that take part in training read it through :func:`state_of`, and
``bagua_shutdown()`` removes it. The original's documented attributes stay plain attributes of the module
(``bagua_algorithm``, ``bagua_optimizers``, ``bagua_buckets``, ``bagua_train_step_counter``,
``process_group``, ``bagua_module_name``, ``bagua_capabilities``, ``bagua_auto_result``,
``bagua_autotune_result``), as does ``_bagua_params_and_buffers_to_ignore``, which the user sets.

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce")
    >>> state_of(model).declaration.name
    'gradient_allreduce'
    >>> model.bagua_shutdown(); state_of(model) is None
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch.utils.hooks import RemovableHandle

from bagua_core.lifecycle.algorithm import Algorithm
from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.lifecycle.scheduler import BucketScheduler
from bagua_core.lifecycle.state import get_state

__all__ = ["ModuleState", "StepTuner", "params_and_buffers_to_ignore", "state_of"]


class StepTuner(Protocol):
    """What the forward pre-hook asks of an autotuner (``bagua_core.selection.autotune.Autotuner``)."""

    impl: Any
    """The impl it tunes: a tuner of an earlier wrap or impl is replaced."""

    def on_step(self, module: torch.nn.Module) -> None: ...


@dataclass(slots=True, eq=False)
class ModuleState:
    """The state of one wrapped module (one ``with_bagua``)."""

    declaration: Algorithm
    """The algorithm as declared (its config): what checkpoints name, fault tolerance re-reifies on a new
    quorum and ``auto`` replaces by its choice. ``module.bagua_algorithm`` is the impl reified from it."""
    do_flatten: bool
    """``with_bagua(do_flatten=...)``: flatten each bucket's tensors into one buffer."""
    sync_enabled: bool = True
    """False inside ``no_sync()`` (and while a wrapper accumulates gradients): backward communicates nothing."""
    find_unused_parameters: bool = False
    """Leave parameters that received no gradient on any rank out of the buckets (``unused_params``)."""
    grad_seen: set[str] = field(default_factory=set)
    """With ``find_unused_parameters``: the parameters whose gradient arrived in this backward."""
    params_in_use: set[str] | None = None
    """With ``find_unused_parameters``: the parameters the buckets were last built for (None: all)."""
    hooks: list[RemovableHandle] = field(default_factory=list)
    """The handles of the forward pre-hook, the per-parameter backward hooks and the optimizer step hooks."""
    post_backward_queued: bool = False
    """Whether this backward's end-of-backward callback is queued already."""
    scheduler: BucketScheduler | None = None
    """Launches the buckets in order (rebuilt with them)."""
    bucket_ready_hook: Callable[[BaguaBucket], None] | None = None
    """The impl's ``init_bucket_ready_hook(module)`` (rebuilt with the buckets)."""
    backward_hook: Callable[[str, torch.nn.Parameter], None] | None = None
    """The impl's ``init_backward_hook(module)``."""
    post_backward_hook: Callable[[], None] | None = None
    """The impl's ``init_post_backward_hook(module)``."""
    forward_pre_hook: Callable[[Any], None] | None = None
    """The impl's ``init_forward_pre_hook(module)``."""
    post_step_hook: Callable[[torch.optim.Optimizer], None] | None = None
    """The impl's ``init_post_optimizer_step_hook(module)``."""
    autotuner: StepTuner | bool | None = None
    """The autotuner; False: tuning is off; None: decided at the next step (``BAGUA_AUTOTUNE``)."""
    shard: Any = None
    """A model sharded with FSDP2: this rank's ``ShardLayout`` (``bagua_core.module.sharded``); None: replicated."""


def state_of(module: torch.nn.Module) -> ModuleState | None:
    """The module's state, or None when it is not wrapped (never, or since ``bagua_shutdown()``)."""
    return get_state(module, ModuleState)


def params_and_buffers_to_ignore(module: torch.nn.Module) -> list[str]:
    """The names the user listed in ``module._bagua_params_and_buffers_to_ignore`` (the original's
    convention, set before wrapping): neither broadcast nor communicated."""
    return list(getattr(module, "_bagua_params_and_buffers_to_ignore", ()))
