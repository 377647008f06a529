"""``Algorithm`` and ``AlgorithmImpl``: what an algorithm author subclasses.

``AlgorithmImpl`` here is the core's, whose buckets are the original's ``BaguaBucket`` (with its
``append_*_op`` methods, :mod:`bagua.torch_api.bucket`)."""

from __future__ import annotations

import torch

from bagua.torch_api.bucket import BaguaBucket, legacy_bucket
from bagua_core.lifecycle.algorithm import Algorithm
from bagua_core.lifecycle.algorithm import AlgorithmImpl as _CoreImpl
from bagua_core.plugins.runtime_registry import GlobalAlgorithmRegistry

__all__ = ["Algorithm", "AlgorithmImpl", "GlobalAlgorithmRegistry", "LegacyBuckets"]


class LegacyBuckets:
    """Mixin for an impl: its buckets, whoever builds them, have the original's ``append_*_op`` methods."""

    def tensors_to_buckets(self, tensors: list[list[torch.Tensor]], do_flatten: bool) -> list[BaguaBucket]:
        return [legacy_bucket(bucket) for bucket in super().tensors_to_buckets(tensors, do_flatten)]


class AlgorithmImpl(LegacyBuckets, _CoreImpl):
    """The core's ``AlgorithmImpl`` with the original's buckets."""
