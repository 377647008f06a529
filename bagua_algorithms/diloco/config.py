"""The options of ``diloco``, validated; errors name the field."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, ValidationInfo, field_validator, model_validator

from bagua_core.api import AlgorithmConfig
from bagua_core.codecs import check_codec_name

__all__ = ["DiLoCoConfig", "STREAMING_FRAGMENTS", "STREAMING_OVERLAP_STEPS", "check_round_seconds"]

STREAMING_FRAGMENTS = 4
STREAMING_OVERLAP_STEPS = 1


def check_round_seconds(config: AlgorithmConfig, streaming: bool = False) -> None:
    """A config with ``round_seconds`` set bounds its rounds in time only (``inner_steps`` is not read): raise when
    ``inner_steps`` is given another value than its default too, or with ``streaming`` (a config built on diloco's
    round, sparseloco's, calls it as well). (Its default is accepted: a config rebuilt from its dump has them all.)"""
    if streaming:
        raise ValueError("round_seconds is not available with streaming=true (streaming's fragments are "
                         "synchronised on staggered step schedules): leave one of them out")
    if config.inner_steps != type(config).model_fields["inner_steps"].default:
        raise ValueError(f"round_seconds ({config.round_seconds:g}) and inner_steps ({config.inner_steps}) both bound "
                         f"a round, in seconds and in steps: give one of them")


class DiLoCoConfig(AlgorithmConfig):
    name: Literal["diloco"] = "diloco"
    inner_steps: StrictInt = Field(100, ge=1)
    """H: optimizer steps each rank takes on its own between two synchronisations of a parameter
    (the DiLoCo paper uses 500)."""
    outer_lr: float = Field(0.7, gt=0)
    """Learning rate of the outer optimizer (SGD with Nesterov momentum) on the averaged pseudo-gradient."""
    outer_momentum: float = Field(0.9, ge=0, lt=1)
    """Momentum of the outer optimizer."""
    nesterov: bool = True
    """Nesterov momentum for the outer optimizer (as in the paper); False: heavy ball."""
    warmup_steps: StrictInt = Field(0, ge=0)
    """Steps of plain gradient allreduce (full precision) before the inner steps begin."""
    streaming: bool = False
    """Streaming DiLoCo: the parameters in ``fragments`` fragments synchronised on staggered schedules,
    each exchange overlapped with the next ``overlap_steps`` inner steps."""
    fragments: StrictInt | None = Field(None, ge=1)
    """Streaming: number of fragments (default 4); fragment p is synchronised at the inner steps t with
    (t + p * H // fragments) % H == 0."""
    overlap_steps: StrictInt | None = Field(None, ge=0, validate_default=True)
    """Streaming: inner steps taken while a fragment's exchange travels (default 1; 0: wait for it)."""
    mixing: float = Field(0.5, ge=0, le=1)
    """Streaming with overlap: weight of the local parameters when the outer result is merged in
    (``x = mixing * x_local + (1 - mixing) * x_outer``); without overlap the local ones are replaced."""
    compression: str | None = None
    """Codec of the outer gradients (``bagua plugins`` lists them, e.g. "MinMaxUInt4"); None: fp32."""
    error_feedback: bool = True
    """With ``compression``: add what the codec dropped to the next outer gradient of that fragment."""
    round_seconds: float | None = Field(None, gt=0)
    """Rounds bounded in time instead of ``inner_steps``: each replica ends its round at the inner step whose end
    is nearest this many seconds of training since the round's first forward (at least one step), so no replica
    waits for a slower one, and the merge weights each pseudo-gradient by the samples behind it
    (docs/algorithms.md). Not with streaming; None: rounds of ``inner_steps`` steps."""

    @field_validator("compression")
    @classmethod
    def _codec_exists(cls, value: str | None) -> str | None:
        return check_codec_name(value)

    @field_validator("fragments", "overlap_steps")
    @classmethod
    def _streaming_only(cls, value: int | None, info: ValidationInfo) -> int | None:
        if not info.data.get("streaming") and value not in (None, 1 if info.field_name == "fragments" else 0):
            raise ValueError(f"{info.field_name} is an option of streaming DiLoCo: set streaming=true, or leave it out")
        if info.field_name == "overlap_steps" and "inner_steps" in info.data:
            overlap = value if value is not None else (STREAMING_OVERLAP_STEPS if info.data.get("streaming") else 0)
            if overlap >= info.data["inner_steps"]:
                raise ValueError(f"overlap_steps ({overlap}) must be smaller than inner_steps ({info.data['inner_steps']}): "
                                 "a fragment's exchange must land before its next one starts")
        return value

    @model_validator(mode="after")
    def _one_round_bound(self) -> DiLoCoConfig:
        if self.round_seconds is not None:
            check_round_seconds(self, streaming=self.streaming)
        return self

    @property
    def fragment_count(self) -> int:
        if self.fragments is not None:
            return self.fragments
        return STREAMING_FRAGMENTS if self.streaming else 1

    @property
    def overlap(self) -> int:
        if self.overlap_steps is not None:
            return self.overlap_steps
        return STREAMING_OVERLAP_STEPS if self.streaming else 0
