"""``Algorithm`` and ``AlgorithmImpl``: what an algorithm author of the original subclasses.

They are the core's classes with what the original's had besides (the adapters live here, not in the core):

- an impl's buckets have the original's ``append_*_op`` methods (:mod:`bagua.torch_api.bucket`);
- its hooks take the module as ``bagua_module`` or ``bagua_ddp`` (:mod:`.hook_parameters`);
- an impl or an algorithm reads its options as attributes (``impl.hierarchical``, ``algorithm.average``), and an
  algorithm written with plain attributes and no config still has one (its name only);
- an algorithm that declares no ``capabilities`` takes what its impl says in the original's impl-level form: the
  class attributes ``weights_differ_across_ranks``, ``exact_resume``, ``supports_autotune``, an overridden
  ``abort``/``resume`` pair (background work), an overridden ``communicates_after_optimizer_step``.

The built-in algorithms under their original names (``bagua.torch_api.algorithms.bytegrad.ByteGradAlgorithm``, ...)
are built from the mixins :class:`OriginalAlgorithm` and :class:`OriginalImpl`.

Example::

    >>> from bagua.torch_api.algorithms import Algorithm, AlgorithmImpl
    >>> class MyImpl(AlgorithmImpl):
    ...     weights_differ_across_ranks = True
    ...     def init_post_backward_hook(self, bagua_ddp):
    ...         return lambda: None
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from bagua.torch_api.algorithms.hook_parameters import adapt_hooks
from bagua.torch_api.algorithms.registry import GlobalAlgorithmRegistry
from bagua.torch_api.bucket import BaguaBucket, legacy_bucket
from bagua_core.lifecycle.algorithm import Algorithm as _CoreAlgorithm
from bagua_core.lifecycle.algorithm import AlgorithmConfig
from bagua_core.lifecycle.algorithm import AlgorithmImpl as _CoreImpl
from bagua_core.lifecycle.capabilities import NOT_DECLARED, Capabilities

__all__ = ["Algorithm", "AlgorithmImpl", "GlobalAlgorithmRegistry", "LegacyBuckets", "OriginalAlgorithm",
           "OriginalImpl"]


class LegacyBuckets:
    """Mixin for an impl: its buckets, whoever builds them, have the original's ``append_*_op`` methods."""

    def tensors_to_buckets(self, tensors: list[list[torch.Tensor]], do_flatten: bool) -> list[BaguaBucket]:
        return [legacy_bucket(bucket) for bucket in super().tensors_to_buckets(tensors, do_flatten)]


class OriginalImpl:
    """Mixin for an impl of the original's API (module doc): hooks taking either module name (its own and the ones
    it inherits), options as attributes, capabilities in the impl-level form."""

    weights_differ_across_ranks: ClassVar[bool] = False
    """The impl-level form of ``Capabilities.weights_differ_across_ranks`` (for an algorithm declaring none)."""
    exact_resume: ClassVar[bool] = True
    """The impl-level form of ``Capabilities.exact_resume`` (for an algorithm declaring none)."""
    supports_autotune: ClassVar[bool | None] = None
    """The impl-level form of ``Capabilities.tunable_bucket_size`` (for an algorithm declaring none); None: not said."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        adapt_hooks(cls, inherited=True)

    def __getattr__(self, item: str) -> Any:
        # the original's impls kept their options as attributes (impl.hierarchical): read them from the config
        config = self.__dict__.get("config")
        if config is not None and item in type(config).model_fields:
            return getattr(config, item)
        raise AttributeError(f"{type(self).__name__} has no attribute {item!r}")

    def older_form_capabilities(self) -> dict[str, bool]:
        """What this impl declares in the impl-level form, as ``Capabilities`` fields (module doc)."""
        cls, older = type(self), {}
        if cls.weights_differ_across_ranks != OriginalImpl.weights_differ_across_ranks:
            older["weights_differ_across_ranks"] = bool(cls.weights_differ_across_ranks)
        if cls.exact_resume != OriginalImpl.exact_resume:
            older["exact_resume"] = bool(cls.exact_resume)
        if cls.supports_autotune is not None:
            older["tunable_bucket_size"] = bool(cls.supports_autotune)
        overridden = getattr(cls.communicates_after_optimizer_step, "__wrapped__", cls.communicates_after_optimizer_step)
        if overridden is not _CoreImpl.communicates_after_optimizer_step:
            older["communicates_after_optimizer_step"] = True
        if self._has_background_controls():
            older["background_work"] = True
        return older

    def _has_background_controls(self) -> bool:
        cls = type(self)
        written = [getattr(getattr(cls, name), "__wrapped__", getattr(cls, name)) for name in ("abort", "resume")]
        return written[0] is not _CoreImpl.abort and written[1] is not _CoreImpl.resume


class OriginalAlgorithm:
    """Mixin for an algorithm of the original's API (module doc): options as attributes, a config even when the
    class sets none, and capabilities from its impl's impl-level form when it declares none."""

    def __getattr__(self, item: str) -> Any:
        if item == "config":  # an algorithm written for the original sets plain attributes, no config
            return AlgorithmConfig(name=self.name or type(self).__name__)
        return super().__getattr__(item)  # its options, as the core's Algorithm reads them

    def capabilities_for(self, impl: Any) -> Capabilities:
        declared = type(self).capabilities
        if declared is not NOT_DECLARED:
            return declared  # the declaration is authoritative
        older = impl.older_form_capabilities() if isinstance(impl, OriginalImpl) else {}
        return dataclasses.replace(Capabilities(), **older)


class AlgorithmImpl(LegacyBuckets, OriginalImpl, _CoreImpl):
    """The core's ``AlgorithmImpl`` with what the original's had (module doc)."""


class Algorithm(OriginalAlgorithm, _CoreAlgorithm):
    """The core's ``Algorithm`` with what the original's had (module doc)."""
