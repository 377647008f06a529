"""Checkpoints as the feature ``checkpoints``: with a ``dir``, a wrap resumes from the last checkpoint there (if
there is one) and every ``every_steps`` training steps the module and its optimizers are saved there; with none, it
applies a checkpoint loaded into the module before the wrap (``load_checkpoint``), where it turns itself on. Either
way the ranks agree on what they resumed from before the first collective, a checkpoint holding each rank's own
weights for the same algorithm keeps them (the wrap broadcasts none), and the step counter, the algorithm's state
and the features' states are restored once the buckets exist. It adds ``bagua_checkpoint_state()`` and
``bagua_load_checkpoint_state()`` to every wrapped module (the protocol of a wrapper that keeps state of its own).

Example::

    >>> model = model.with_bagua([optimizer], "decentralized", features={"checkpoints": {"dir": "ckpt",
    ...                                                                                   "every_steps": 100}})
    >>> # a restarted job runs the same line: it resumes from ckpt's last checkpoint
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from pydantic import Field

from bagua_core.api import Feature, FeatureConfig, WrappedModule
from bagua_features.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from bagua_features.checkpoints.files import read_tracker
from bagua_features.checkpoints.resume import (
    ResumedState,
    apply_resumed_state,
    checkpoint_state,
    load_checkpoint_state,
    pending_resume,
)

__all__ = ["CheckpointsConfig", "CheckpointsFeature"]


class CheckpointsConfig(FeatureConfig):
    name: Literal["checkpoints"] = "checkpoints"
    """The feature's name."""
    dir: str | None = None
    """Resume from the last checkpoint in this directory at the wrap, and save there every ``every_steps``; None:
    only apply a checkpoint loaded before the wrap."""
    every_steps: int | None = Field(None, ge=1)
    """Save after every this many training steps (with ``dir``; the checkpoint's iteration is the module's step
    counter); None: never (save with ``save_checkpoint`` yourself)."""


class CheckpointsFeature(Feature):
    """Resume exactly at the wrap; save every ``every_steps`` steps (module doc)."""

    name = "checkpoints"
    Config = CheckpointsConfig
    module_attributes = {
        "bagua_checkpoint_state": lambda module: functools.partial(checkpoint_state, module),
        "bagua_load_checkpoint_state": lambda module: functools.partial(load_checkpoint_state, module),
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._resumed: ResumedState | None = None

    @classmethod
    def requested(cls, module: torch.nn.Module | None) -> Mapping[str, Any] | None:
        """A checkpoint loaded into ``module`` before the wrap."""
        return {} if module is not None and pending_resume(module) is not None else None

    def agreed_fields(self, module: torch.nn.Module) -> Mapping[str, Any]:
        resumed = pending_resume(module)
        fields: dict[str, Any] = {"checkpoint resumed from": resumed.key() if resumed is not None else None}
        if self.config.dir is not None:
            fields[f"last checkpoint in {self.config.dir}"] = read_tracker(self.config.dir)
        return fields

    def setup(self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        if self.config.dir is not None and pending_resume(module) is None and read_tracker(self.config.dir) is not None:
            load_checkpoint(self.config.dir, module, optimizers[0] if len(optimizers) == 1 else None)
        self._resumed = pending_resume(module)

    def keeps_own_weights(self, module: torch.nn.Module, algorithm: Any) -> bool:
        return self._resumed is not None and self._resumed.keeps_own_weights(algorithm.name)

    def wrapped(self, module: torch.nn.Module) -> None:
        resumed, self._resumed = self._resumed, None
        if resumed is not None:  # the counter, the algorithm's state and the features'
            apply_resumed_state(module, resumed)

    def after_step(self, module: torch.nn.Module) -> None:
        every, wrapped = self.config.every_steps, WrappedModule(module)
        if self.config.dir is not None and every is not None and wrapped.train_step_counter % every == 0:
            optimizers = wrapped.optimizers
            save_checkpoint(wrapped.train_step_counter, self.config.dir, module,
                            optimizers[0] if len(optimizers) == 1 else None)
