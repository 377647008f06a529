"""The options of ``bytegrad``."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from bagua_core.api import AlgorithmConfig
from bagua_core.codecs import check_codec_name

__all__ = ["ByteGradConfig"]


class ByteGradConfig(AlgorithmConfig):
    name: Literal["bytegrad"] = "bytegrad"
    hierarchical: bool = True
    """Average inside each node first; the compressed exchange then runs among the node leaders."""
    average: bool = True
    """Average the gradients (True) or sum them (False)."""
    compression: str = "MinMaxUInt8"
    """The codec of the exchange (any installed one, ``bagua plugins`` lists them: MinMaxUInt4, fp16,
    bf16, ScaledSign, ...); MinMaxUInt8 runs the native fused kernels."""

    _check_compression = field_validator("compression")(lambda cls, value: check_codec_name(value))
