"""The options of ``powersgd``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt

from bagua_core.api import AlgorithmConfig

__all__ = ["PowerSGDConfig"]


class PowerSGDConfig(AlgorithmConfig):
    name: Literal["powersgd"] = "powersgd"
    matrix_approximation_rank: StrictInt = Field(1, ge=1)
    """Rank r of the approximation ``P Q^T`` of each gradient matrix (1-4 is typical)."""
    start_iter: StrictInt = Field(10, ge=0)
    """Steps of plain gradient allreduce (full precision) before compression starts."""
    min_compression_rate: float = Field(2.0, gt=0)
    """Compress a matrix only if ``(rows + cols) * r * min_compression_rate < rows * cols``; others are
    averaged uncompressed."""
    use_error_feedback: bool = True
    """Add what the approximation missed to the next step's gradient (strongly recommended)."""
    warm_start: bool = True
    """Start each step's power iteration from the previous step's Q (else a fresh random Q every step)."""
    orthogonalization_epsilon: float = Field(0.0, ge=0)
    """Added to each column norm when orthonormalising (guards against all-zero columns)."""
    random_seed: StrictInt = Field(0, ge=0, lt=2**32)
    """Seed of the random initial Q (the same on every rank)."""
