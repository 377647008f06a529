"""Autotuning as the feature ``autotune``: ``BAGUA_AUTOTUNE=1`` turns it on for every wrap (with the options of
``BAGUA_AUTOTUNE_*``), ``with_bagua(..., features={"autotune": {"trial_steps": 3}})`` for one, :func:`configure` for
one wrapped module. Before each training forward it runs the tuner (:mod:`.tuner`), which may rebuild the buckets
for the next candidate; ``module.bagua_autotune_result`` is what it chose (None until it has).

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce", features={"autotune": {"warmup_steps": 2}})
    >>> model.bagua_autotune_result           # after warmup_steps + candidates * trial_steps steps
    {'bucket_size': 1048576, 'hierarchical': None, 'step_time_s': {...}}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from bagua_core.api import BaguaConfigError, Feature, WrappedModule
from bagua_features.autotune.tuner import AutotuneConfig, Autotuner

__all__ = ["AutotuneFeature", "autotune_result", "configure"]


class AutotuneFeature(Feature):
    """Tunes the bucket size (and hierarchical on/off where it applies) from measured step time."""

    name = "autotune"
    Config = AutotuneConfig
    module_attributes = {"bagua_autotune_result": lambda module: autotune_result(module)}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.tuner: Autotuner | None = None

    @classmethod
    def requested(cls, module: torch.nn.Module | None) -> Mapping[str, Any] | None:
        """``BAGUA_AUTOTUNE=1``: every wrap, with the options of ``BAGUA_AUTOTUNE_*``."""
        if module is None or os.environ.get("BAGUA_AUTOTUNE", "").lower() not in ("1", "true", "yes"):
            return None
        return AutotuneConfig.from_env().model_dump(exclude={"name"})

    def before_forward(self, module: torch.nn.Module) -> bool:
        """Run the tuner (a new one for a new impl: a re-wrap, ``auto`` handing the module to its choice). True when
        it applied a candidate, so the buckets are rebuilt for it."""
        if not self.config.enabled:
            return False
        impl = WrappedModule(module).impl
        if self.tuner is None or self.tuner.impl is not impl:
            self.tuner = Autotuner(module, self.config)
        return self.tuner.on_step(module)

    @property
    def result(self) -> dict[str, Any] | None:
        """What the tuner chose, once it has."""
        return self.tuner.result if self.tuner is not None else None


def autotune_result(module: torch.nn.Module) -> dict[str, Any] | None:
    """``module.bagua_autotune_result``: what the module's autotuner chose (None until it has, or without one)."""
    found = [f for f in WrappedModule(module).features if isinstance(f, AutotuneFeature)]
    return found[0].result if found else None


def configure(module: torch.nn.Module, config: AutotuneConfig | None = None, **options: Any) -> None:
    """Turn autotuning on (or off) for one wrapped module from now on, overriding ``BAGUA_AUTOTUNE``; call it on
    every rank alike (the tuner's decision is a collective).

    Example::

        >>> configure(model, warmup_steps=2, trial_steps=3, bucket_sizes=(1 << 20, 1 << 22))
    """
    if not WrappedModule.is_wrapped(module):
        raise BaguaConfigError(f"autotune: {type(module).__name__} is not wrapped (call with_bagua first)")
    config = config or AutotuneConfig(**options)
    WrappedModule(module).add_feature(AutotuneFeature(**config.model_dump(exclude={"name"})))
