"""The options of the feature ``gradient_clipping``, each spelled once."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from bagua_core.api import FeatureConfig

__all__ = ["GradientClippingConfig"]


class GradientClippingConfig(FeatureConfig):
    name: Literal["gradient_clipping"] = "gradient_clipping"
    """The feature's name."""
    max_norm: float = Field(gt=0)
    """The largest total norm the gradients the optimizer steps with may have (required)."""
    norm_type: float = 2.0
    """Which p-norm: 2.0 (the default), 1.0, ``inf``, ... as ``torch.nn.utils.clip_grad_norm_`` takes it."""
    error_if_nonfinite: bool = False
    """Raise when the total norm is inf or nan instead of clipping with it (``clip_grad_norm_``'s option)."""

    @field_validator("norm_type")
    @classmethod
    def _positive(cls, value: float) -> float:
        if not (value > 0 or math.isinf(value)):
            raise ValueError(f"norm_type must be > 0 or inf, got {value!r}")
        return value
