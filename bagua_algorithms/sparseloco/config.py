"""The options of ``sparseloco``, validated; errors name the field.

The round it runs on is diloco's (``bagua_algorithms.diloco.DiLoCoAlgorithmImpl``): the properties below give
the names diloco's round reads (``bagua_algorithms.diloco.RoundOptions``) and fix what sparseloco does not vary
(no warmup, one fragment; a merge after an overlap keeps the replica's progress).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, ValidationInfo, field_validator, model_validator

from bagua_algorithms.diloco import check_eager, check_overlap, check_round_seconds
from bagua_core.api import AlgorithmConfig

__all__ = ["SparseLoCoConfig", "MAX_CHUNK_SIZE"]

MAX_CHUNK_SIZE = 1 << 16
"""The largest ``chunk_size``. The message does not need it (its indices travel Elias-Fano coded, :mod:`.codec`,
not as 16 bits each): it bounds the selection's padding, every tensor's last chunk being selected from a row of
``chunk_size`` elements (:mod:`.chunks`)."""


class SparseLoCoConfig(AlgorithmConfig):
    name: Literal["sparseloco"] = "sparseloco"
    inner_steps: StrictInt = Field(30, ge=1)
    """H: optimizer steps each replica takes on its own between two exchanges."""
    outer_lr: float = Field(1.0, gt=0)
    """alpha: ``theta_global -= alpha * (mean over replicas of what they sent)``; no outer momentum."""
    error_decay: float = Field(0.95, ge=0, le=1)
    """beta: each round the error-feedback accumulator becomes ``e = beta * e + delta`` (1: plain error
    feedback; 0: what a replica did not send is dropped at the next round)."""
    chunk_size: StrictInt = Field(4096, ge=1, le=MAX_CHUNK_SIZE)
    """C: each parameter tensor (flattened) is cut into consecutive chunks of C elements (the last may be
    shorter), at most 65536 (``MAX_CHUNK_SIZE``: the selection pads each tensor's last chunk to ``chunk_size``)."""
    topk: StrictInt = Field(64, ge=1)
    """k: entries of largest ``|e|`` each chunk sends (a shorter chunk sends min(k, its length)); at most
    ``chunk_size``."""
    bits: Literal[2, 4, 8, 32] = 2
    """Bits per value sent: 2, 4 or 8 (one sign bit, the rest a level between the chunk's smallest and largest
    ``|e|`` sent; docs/algorithms.md states the quantiser), or 32: the fp32 values, exact."""
    overlap_steps: StrictInt = Field(0, ge=0)
    """tau, less than ``inner_steps``: inner steps taken while a round's message travels (0: wait for it). The
    replica then merges keeping what it trained meanwhile, ``x = theta_global' + (x_now - x_sent)``; the
    accumulator and the message are the round's boundary's (docs/algorithms.md)."""
    eager: bool = False
    """With ``overlap_steps`` > 0: eager updates, diloco's ``eager`` (a proxy outer step from this replica's fresh
    pseudo-gradient and the others' messages of the round before, corrected when the average lands)."""
    round_seconds: float | None = Field(None, gt=0)
    """Rounds bounded in time instead of ``inner_steps`` (diloco's ``round_seconds``): no replica waits for a slower
    one, and ``theta_global -= alpha * sum_r n_r * sent_r / sum_r n_r`` weights what each replica sent by the
    samples behind it (docs/algorithms.md). None: rounds of ``inner_steps`` steps."""

    @field_validator("topk")
    @classmethod
    def _at_most_a_chunk(cls, value: int, info: ValidationInfo) -> int:
        chunk_size = info.data.get("chunk_size")
        if chunk_size is not None and value > chunk_size:
            raise ValueError(f"topk ({value}) must be at most chunk_size ({chunk_size}): a chunk has no more entries "
                             f"to send")
        return value

    @field_validator("overlap_steps")
    @classmethod
    def _lands_within_a_round(cls, value: int, info: ValidationInfo) -> int:
        if "inner_steps" in info.data:
            check_overlap(value, info.data["inner_steps"])
        return value

    @model_validator(mode="after")
    def _one_round_bound(self) -> SparseLoCoConfig:
        if self.round_seconds is not None:
            check_round_seconds(self)
        if self.eager:
            check_eager(self.overlap_steps, timed=self.round_seconds is not None)
        return self

    # --- what diloco's round reads and sparseloco fixes (bagua_algorithms.diloco.RoundOptions) ----
    @property
    def warmup_steps(self) -> int:
        return 0

    @property
    def fragment_count(self) -> int:
        return 1

    @property
    def overlap(self) -> int:
        return self.overlap_steps

    @property
    def keeps_progress(self) -> bool:
        return True

    @property
    def mixing(self) -> float:
        return 0.0
