"""Options of the main job (``bagua train``), from flags or from the ``[training]`` table of a config file."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TrainingConfig", "DEFAULT_LR"]

DEFAULT_LR = {"sgd": 0.05, "adam": 0.002}


class TrainingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    epochs: int = Field(10, ge=1)
    """Passes over the training set."""
    batch_size: int = Field(32, ge=1)
    """Samples per step on each worker."""
    lr: float | None = Field(None, gt=0)
    """Learning rate (default: 0.05 for sgd, 0.002 for adam, the algorithm's for its own optimizer)."""
    optimizer: Literal["sgd", "adam"] = "sgd"
    """Optimizer. An algorithm declaring ``capabilities.builds_optimizer`` (qadam) gets its own instead,
    from ``Algorithm.build_optimizer``."""
    momentum: float = Field(0.9, ge=0, lt=1)
    """SGD momentum."""
    hidden: int = Field(128, ge=1)
    """Width of the MLP's hidden layers."""
    seed: int = 0
    """Seed of the model's initial weights and of the data order."""
    progress: bool = True
    """Show a progress bar on rank 0."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the model trains: ``cuda`` (each rank on GPU local rank modulo the GPU count), ``cpu``, or ``auto``:
    CUDA when there is one GPU per local rank, else the CPU."""
