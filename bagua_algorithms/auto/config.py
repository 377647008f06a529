"""The options of ``auto``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from bagua_core.api import Algorithm, AlgorithmConfig, algorithm_registry

__all__ = ["AUTO", "AutoConfig", "auto_candidate", "candidate_names"]

AUTO = "auto"
"""The name this algorithm is registered by."""


def auto_candidate(algorithm: type[Algorithm]) -> bool:
    """Whether ``auto`` may choose ``algorithm`` with its default options: it keeps the optimizer's semantics
    and needs nothing special (no optimizer of its own, no stepping inside backward, no background work,
    equal weights on every rank)."""
    caps = algorithm.capabilities
    return (caps.keeps_optimizer_semantics and not caps.builds_optimizer and not caps.steps_optimizer_in_backward
            and not caps.background_work and not caps.weights_differ_across_ranks)


def candidate_names() -> list[str]:
    """The installed algorithms ``auto`` may choose, in name order (never ``auto`` itself)."""
    return [name for name in algorithm_registry.names()
            if name != AUTO and auto_candidate(algorithm_registry.get(name))]


class AutoConfig(AlgorithmConfig):
    name: Literal["auto"] = "auto"
    candidates: tuple[str, ...] | None = None
    """Names to choose among (each must be an installed auto candidate); None: every installed one."""
    warmup_steps: int = Field(2, ge=0)
    """Steps with the first candidate before the first trial."""
    trial_steps: int = Field(5, ge=2)
    """Steps per candidate; the first of them (it rebuilds the buckets) is not timed."""

    @field_validator("candidates")
    @classmethod
    def _known(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        allowed = candidate_names()
        wrong = [name for name in value if name not in allowed]
        if wrong or not value:
            raise ValueError(f"candidates must be installed algorithms that keep the optimizer's semantics "
                             f"({', '.join(allowed) or 'none installed'}), got {list(value)}")
        return tuple(dict.fromkeys(value))
