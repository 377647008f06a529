"""The options of ``low_precision_decentralized``."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from bagua_algorithms.decentralized import check_positive_int
from bagua_core.api import AlgorithmConfig
from bagua_core.codecs import check_codec_name

__all__ = ["LowPrecisionDecentralizedConfig"]


class LowPrecisionDecentralizedConfig(AlgorithmConfig):
    name: Literal["low_precision_decentralized"] = "low_precision_decentralized"
    hierarchical: bool = True
    """Average inside each node first; the ring then runs among the nodes."""
    communication_interval: int = 1
    """Communicate every this many training steps (steps t with t % communication_interval == 0)."""
    compression: str = "MinMaxUInt8"
    """The codec of the weight differences (any installed one, ``bagua plugins`` lists them: MinMaxUInt4, fp16,
    bf16, ScaledSign, ...); MinMaxUInt8 runs the native fused kernels."""

    _check_interval = field_validator("communication_interval", mode="before")(check_positive_int)
    _check_compression = field_validator("compression")(lambda cls, value: check_codec_name(value))
