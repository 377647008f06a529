"""The options of ``async``."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from bagua_core.api import AlgorithmConfig

__all__ = ["AsyncModelAverageConfig"]


class AsyncModelAverageConfig(AlgorithmConfig):
    name: Literal["async"] = "async"
    peer_selection_mode: Literal["all"] = "all"
    """Which ranks average together each round: "all" (every rank)."""
    sync_interval_ms: int = 500
    """Milliseconds between the starts of two averaging rounds (a positive integer)."""
    warmup_steps: int = 0
    """Steps of plain gradient allreduce before the asynchronous averaging starts."""
    weighting: Literal["equal", "samples"] = "equal"
    """How a round weights each rank's weights: "equal" (the mean), or "samples": by the rank's throughput, its
    samples per round since the averaging began, ``sum_r rho_r x_r / sum_r rho_r`` (a faster rank's weights count
    more)."""

    @field_validator("sync_interval_ms", "warmup_steps", mode="before")
    @classmethod
    def _check_ints(cls, value: object, info) -> int:
        minimum = 1 if info.field_name == "sync_interval_ms" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            what = "a positive integer" if minimum else "a non-negative integer"
            raise ValueError(f"{info.field_name} must be {what}, got {value!r}")
        return value
