"""The options of ``local_sgd``: each spelled once, here (the algorithm takes them as keywords, the impl
receives this validated config)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, field_validator

from bagua_core.api import AlgorithmConfig

__all__ = ["LocalSGDConfig"]


class LocalSGDConfig(AlgorithmConfig):
    name: Literal["local_sgd"] = "local_sgd"
    sync_every: StrictInt = Field(4)
    """Average the parameters over all ranks after every ``sync_every`` local optimizer steps."""
    warmup_steps: StrictInt = Field(0)
    """Steps of plain gradient allreduce before the local steps begin (0: local from the first step)."""

    @field_validator("sync_every")
    @classmethod
    def _sync_every_positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"sync_every must be a positive integer, got {value}")
        return value

    @field_validator("warmup_steps")
    @classmethod
    def _warmup_not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"warmup_steps must be a non-negative integer, got {value}")
        return value
