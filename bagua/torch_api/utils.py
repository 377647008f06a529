"""Tensor helpers (flatten, unflatten, apply_flattened_call, StatisticalAverage)."""

from __future__ import annotations

from bagua_core.utils import (
    StatisticalAverage,
    apply_flattened_call,
    apply_flattened_call_all,
    check_contiguous,
    flatten,
    get_flattened_tensor,
    unflatten,
)

__all__ = [
    "StatisticalAverage", "apply_flattened_call", "apply_flattened_call_all", "check_contiguous", "flatten",
    "get_flattened_tensor", "unflatten",
]
