"""Telling expert parameters apart: they live on one rank each, so they are neither broadcast nor
averaged by the data-parallel algorithm, and checkpoints save them per rank."""

from __future__ import annotations

import torch

from bagua_core.lifecycle.module_state import params_and_buffers_to_ignore

__all__ = ["ignore_moe_params", "is_moe_param", "mark_moe_param", "moe_param_names"]


def mark_moe_param(param: torch.Tensor) -> None:
    """Mark ``param`` as an expert parameter (the seed's ``param.allreduce = False``)."""
    param.allreduce = False
    param.expert = True


def is_moe_param(param: torch.Tensor) -> bool:
    """Whether ``param`` belongs to an expert (sharded over ranks, not averaged)."""
    return hasattr(param, "allreduce") and not param.allreduce


def moe_param_names(module: torch.nn.Module) -> list[str]:
    """Names (as in ``module.state_dict()``) of the expert parameters of ``module``."""
    return [name for name, param in module.named_parameters() if is_moe_param(param)]


def ignore_moe_params(module: torch.nn.Module) -> torch.nn.Module:
    """Make ``with_bagua`` leave the expert parameters alone (no broadcast from rank 0, no gradient
    averaging): call it on the root module before wrapping. Returns ``module``. It extends the module's
    ``_bagua_params_and_buffers_to_ignore``, the list a user sets (the original's convention).

    Example::

        >>> model = ignore_moe_params(model).with_bagua([optimizer], "gradient_allreduce")
    """
    ignored = set(params_and_buffers_to_ignore(module))
    module._bagua_params_and_buffers_to_ignore = sorted(ignored | set(moe_param_names(module)))
    return module
