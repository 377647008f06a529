"""What a main job's ``TrainingConfig`` asks for at run time: the device and the optimizer (shared by the
fail-fast job ``train_digits`` and the fault-tolerant one ``train_digits_ft``)."""

from __future__ import annotations

import torch

import bagua_core as bagua
from bagua_examples.training_config import DEFAULT_LR, TrainingConfig

__all__ = ["make_optimizer", "resolve_device"]


def make_optimizer(
    model: torch.nn.Module, cfg: TrainingConfig, algorithm: type[bagua.Algorithm], steps_per_epoch: int
) -> torch.optim.Optimizer:
    """The optimizer of ``cfg``: the algorithm's own where it declares ``builds_optimizer`` (qadam's), else
    Adam or SGD at ``cfg.lr`` (or the optimizer's default rate)."""
    if algorithm.capabilities.builds_optimizer:  # it needs an optimizer of its own kind
        return algorithm.build_optimizer(model.parameters(), lr=cfg.lr, steps_per_epoch=steps_per_epoch)
    lr = cfg.lr if cfg.lr is not None else DEFAULT_LR[cfg.optimizer]
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.momentum)


def resolve_device(choice: str) -> torch.device:
    """The device of ``--device``: ``auto`` is CUDA when every local rank has a GPU of its own.
    Call after ``init_process_group`` (which selected this rank's GPU)."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise bagua.BaguaError("--device cuda, but torch sees no CUDA device here; use --device cpu or auto")
    if choice == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    if choice == "auto" and torch.cuda.device_count() < bagua.get_local_size():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())
