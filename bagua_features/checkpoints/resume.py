"""What a checkpoint keeps of a wrapped module beyond its state dict, and how a resume applies it.

``save_checkpoint`` asks :func:`checkpoint_state`: the algorithm's name, whether the ranks' weights
differ (``Capabilities.weights_differ_across_ranks``: every rank then saves its own weights and
optimizer state), whether its resume is exact, the train step counter (it decides communication
steps, peers and phases), the impl's own ``state_dict`` and the features' (``Feature.state_dict``).
``load_checkpoint`` hands it to :func:`load_checkpoint_state`: applied at once to a wrapped module, else kept
for ``with_bagua``, where the feature ``checkpoints`` turns itself on (:mod:`.feature`): the wrap compares the
resumed checkpoint across ranks, keeps each rank's own weights when the checkpoint has them for the same
algorithm (instead of broadcasting rank 0's), then restores the counter and the states once the buckets exist.
A checkpoint waiting for ``with_bagua`` is the module's bagua state (``bagua_core.lifecycle.state``) until the
wrap replaces it by the module's ``ModuleState``.

Example::

    >>> saved = checkpoint_state(model)                   # {"algorithm": "decentralized", "per_rank": True, ...}
    >>> load_checkpoint_state(fresh_model, 100, saved)    # before with_bagua: applied when it wraps
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch

from bagua_core.api import WrappedModule
from bagua_core.lifecycle.module_state import state_of
from bagua_core.lifecycle.state import get_state, set_state

__all__ = ["ResumedState", "apply_resumed_state", "checkpoint_state", "load_checkpoint_state", "pending_resume",
           "restore_saved_state", "saved_state_of"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ResumedState:
    """A checkpoint loaded into a module that is not wrapped yet."""

    iteration: int
    algorithm: str
    per_rank: bool
    train_step_counter: int
    algorithm_state: dict[str, Any]
    feature_states: dict[str, Any] = dataclasses.field(default_factory=dict)

    def key(self) -> str:
        """What every rank must have resumed from (compared by ``with_bagua``)."""
        return f"iteration {self.iteration} ({self.algorithm}{', each rank its own weights' if self.per_rank else ''})"

    def keeps_own_weights(self, algorithm: str) -> bool:
        """Whether wrapping with ``algorithm`` keeps each rank's loaded weights (no broadcast from rank 0)."""
        return self.per_rank and algorithm == self.algorithm


def pending_resume(module: torch.nn.Module) -> ResumedState | None:
    """The checkpoint loaded into ``module`` before it was wrapped, if any (``with_bagua`` applies it)."""
    return get_state(module, ResumedState)


def checkpoint_state(module: torch.nn.Module) -> dict[str, Any] | None:
    """The bagua part of a checkpoint of ``module`` (None when it is not wrapped)."""
    state = state_of(module)
    if state is None:
        return None
    return {
        "algorithm": state.declaration.name,
        "per_rank": state.capabilities.weights_differ_across_ranks,
        "exact": state.capabilities.exact_resume,
        "train_step_counter": int(state.train_step_counter),
        "state": state.impl.state_dict(),
        "features": WrappedModule(module).features_state_dict(),
    }


def apply_resumed_state(module: torch.nn.Module, resumed: ResumedState) -> None:
    """Restore the counter and, for the same algorithm, the impl's state into a wrapped module."""
    state = state_of(module)
    state.train_step_counter = resumed.train_step_counter
    WrappedModule(module).load_features_state_dict(resumed.feature_states)
    name = state.declaration.name
    if name != resumed.algorithm:
        logger.warning("the checkpoint of iteration %d was saved with %s, the module now uses %s: its algorithm "
                       "state is not restored", resumed.iteration, resumed.algorithm, name)
        return
    state.impl.load_state_dict(resumed.algorithm_state)


def load_checkpoint_state(module: torch.nn.Module, iteration: int, saved: dict[str, Any]) -> None:
    """Apply ``saved`` (from :func:`checkpoint_state`) now if ``module`` is wrapped, else at ``with_bagua``."""
    resumed = ResumedState(iteration, saved["algorithm"], bool(saved["per_rank"]), int(saved["train_step_counter"]),
                           dict(saved.get("state") or {}), dict(saved.get("features") or {}))
    if state_of(module) is not None:
        apply_resumed_state(module, resumed)
    else:
        set_state(module, resumed)


def saved_state_of(model: Any) -> dict[str, Any] | None:
    """What ``save_checkpoint`` keeps of ``model`` beyond its state dicts: a wrapped module's
    (:func:`checkpoint_state`), or, for an object wrapping one that keeps state of its own (a plugin's wrapper
    class), what its ``bagua_checkpoint_state()`` returns: the checkpoint protocol of such wrappers; None for
    anything else."""
    if state_of(model) is None:
        own = getattr(model, "bagua_checkpoint_state", None)
        if callable(own):
            return own()
    return checkpoint_state(model)


def restore_saved_state(model: Any, iteration: int, saved: dict[str, Any]) -> None:
    """Put back what :func:`saved_state_of` returned: a wrapper's through its ``bagua_load_checkpoint_state``, a
    module's now (wrapped) or at ``with_bagua`` (:func:`load_checkpoint_state`)."""
    if state_of(model) is None:
        own = getattr(model, "bagua_load_checkpoint_state", None)
        if callable(own):
            own(iteration, saved)
            return
    load_checkpoint_state(model, iteration, saved)
