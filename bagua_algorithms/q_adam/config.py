"""The options of ``qadam`` (the optimizer's own, lr, warmup_steps, betas, ..., are ``QAdamOptimizer``'s)."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from bagua_core.api import AlgorithmConfig
from bagua_core.codecs import check_codec_name

__all__ = ["QAdamConfig"]


class QAdamConfig(AlgorithmConfig):
    name: Literal["qadam"] = "qadam"
    hierarchical: bool = True
    """After warmup: average the momentum inside each node first, compress among the node leaders."""
    compression: str = "MinMaxUInt8"
    """The codec of the momentum exchange after warmup (any installed one, ``bagua plugins`` lists them: MinMaxUInt4, fp16,
    bf16, ScaledSign, ...); MinMaxUInt8 runs the native fused kernels."""

    _check_compression = field_validator("compression")(lambda cls, value: check_codec_name(value))
