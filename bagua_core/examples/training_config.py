"""Options of the main job (``bagua train``), from flags or from the ``[training]`` table of a config file."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TrainingConfig"]


class TrainingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    epochs: int = Field(10, ge=1)
    """Passes over the training set."""
    batch_size: int = Field(32, ge=1)
    """Samples per step on each worker."""
    lr: float = Field(0.05, gt=0)
    """Learning rate."""
    optimizer: Literal["sgd", "adam", "qadam"] = "sgd"
    """Optimizer; ``qadam`` (bagua's QAdamOptimizer) is chosen automatically for the qadam algorithm."""
    momentum: float = Field(0.9, ge=0, lt=1)
    """SGD momentum."""
    hidden: int = Field(128, ge=1)
    """Width of the MLP's hidden layers."""
    seed: int = 0
    """Seed of the model's initial weights and of the data order."""
    progress: bool = True
    """Show a progress bar on rank 0."""
