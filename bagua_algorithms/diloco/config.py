"""The options of ``diloco``, validated; errors name the field."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, ValidationInfo, field_validator, model_validator

from bagua_core.api import AlgorithmConfig
from bagua_core.codecs import check_codec_name

__all__ = ["DiLoCoConfig", "STREAMING_FRAGMENTS", "STREAMING_OVERLAP_STEPS", "check_eager", "check_overlap",
           "check_round_seconds"]

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


def check_overlap(overlap_steps: int, inner_steps: int) -> None:
    """Raise unless a round's exchange, left in flight for ``overlap_steps`` inner steps, lands before the next
    round's starts (a config built on diloco's round, sparseloco's, calls it as well)."""
    if overlap_steps >= inner_steps:
        raise ValueError(f"overlap_steps ({overlap_steps}) must be smaller than inner_steps ({inner_steps}): a round's "
                         "exchange must land before the next one starts")


def check_eager(overlap_steps: int, streaming: bool = False, timed: bool = False) -> None:
    """Raise unless eager updates have inner steps to fill (``overlap_steps`` > 0) and rounds of ``inner_steps``
    that are not streamed."""
    if timed:
        raise ValueError("eager is not available with round_seconds (its proxy step mixes in the others' messages of "
                         "the round before, which rounds bounded in time weigh by their samples): leave one of them out")
    if streaming:
        raise ValueError("eager is not available with streaming=true (a streamed fragment mixes its outer step in): "
                         "leave one of them out")
    if overlap_steps == 0:
        raise ValueError("eager needs overlap_steps > 0: it fills the inner steps during which a round's exchange "
                         "travels; set overlap_steps, or leave eager out")


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
    """tau (less than ``inner_steps``): inner steps taken while a round's exchange travels (streaming: a fragment's,
    default 1; otherwise default 0: wait for it). Without streaming the replica then merges the outer step keeping
    what it trained meanwhile, ``x = theta_global' + (x_now - x_sent)`` (docs/algorithms.md)."""
    eager: bool = False
    """With ``overlap_steps`` > 0, without streaming: eager updates (Kale, Douillard, Donchev 2025). At the round's
    boundary the replica continues from a proxy outer step, taken with its own fresh pseudo-gradient and the
    others' of the round before, and corrects it with the true outer step when the average lands."""
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

    @field_validator("fragments")
    @classmethod
    def _streaming_only(cls, value: int | None, info: ValidationInfo) -> int | None:
        if not info.data.get("streaming") and value not in (None, 1):
            raise ValueError("fragments is an option of streaming DiLoCo: set streaming=true, or leave it out")
        return value

    @field_validator("overlap_steps")
    @classmethod
    def _lands_within_a_round(cls, value: int | None, info: ValidationInfo) -> int | None:
        if "inner_steps" in info.data:
            check_overlap(value if value is not None else (STREAMING_OVERLAP_STEPS if info.data.get("streaming") else 0),
                          info.data["inner_steps"])
        return value

    @model_validator(mode="after")
    def _one_round_bound(self) -> DiLoCoConfig:
        if self.round_seconds is not None:
            check_round_seconds(self, streaming=self.streaming)
        if self.eager:
            check_eager(self.overlap, streaming=self.streaming, timed=self.round_seconds is not None)
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

    @property
    def keeps_progress(self) -> bool:
        return not self.streaming
