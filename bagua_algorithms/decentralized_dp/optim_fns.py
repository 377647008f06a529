"""Building per-bucket optimizers: weight-decay grouping and "an optimizer like the user's".

Biases and normalization parameters (``ndim <= 1``) conventionally get no weight decay. The original
decent-dp scripts inverted that grouping (decaying exactly the norm/bias parameters and sparing the
weights); here the parameters that are asked to be spared get ``weight_decay = 0`` and the others
keep the requested decay.

Example::

    >>> optim_fn = optim_fn_for(torch.optim.AdamW, lr=1e-3, weight_decay=0.05)
    >>> optim_fn([("fc.weight", w), ("fc.bias", b)]).param_groups[1]["weight_decay"]
    0.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["is_no_decay", "optim_fn_for", "optim_fn_like", "weight_decay_groups"]

NamedParams = list[tuple[str, torch.nn.Parameter]]


def is_no_decay(name: str, param: torch.Tensor) -> bool:
    """Biases and normalization weights: one-dimensional (or scalar) parameters, or names ending in ``bias``."""
    return param.dim() <= 1 or name.endswith("bias")


def weight_decay_groups(named_params: NamedParams, weight_decay: float,
                        no_decay_on_norm_and_bias: bool = True) -> list[dict[str, Any]]:
    """Param groups: the decayed parameters with ``weight_decay``; when ``no_decay_on_norm_and_bias``, the
    biases and norm parameters in a second group with ``weight_decay = 0``. Empty groups are left out."""
    if not no_decay_on_norm_and_bias:
        return [{"params": [p for _, p in named_params], "weight_decay": weight_decay}]
    decay = [p for n, p in named_params if not is_no_decay(n, p)]
    spared = [p for n, p in named_params if is_no_decay(n, p)]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": spared, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def optim_fn_for(optimizer_cls: type[torch.optim.Optimizer], weight_decay: float = 0.0,
                 no_decay_on_norm_and_bias: bool = True, **options: Any) -> Callable[[NamedParams], Any]:
    """An ``optim_fn`` building ``optimizer_cls(weight_decay_groups(...), **options)`` per bucket."""

    def optim_fn(named_params: NamedParams) -> torch.optim.Optimizer:
        groups = weight_decay_groups(named_params, weight_decay, no_decay_on_norm_and_bias)
        return optimizer_cls(groups, **options)

    return optim_fn


def optim_fn_like(optimizer: torch.optim.Optimizer) -> Callable[[NamedParams], Any]:
    """An ``optim_fn`` building ``type(optimizer)(groups, **optimizer.defaults)`` per bucket, where each
    parameter lands in a group with the options of its group in ``optimizer`` (so a user's no-decay
    group keeps ``weight_decay = 0``). Before every step the bucket's groups copy the current options of
    the user's groups, so a scheduler driving the user's optimizer drives the buckets too."""
    group_of = {id(p): index for index, g in enumerate(optimizer.param_groups) for p in g["params"]}

    def optim_fn(named_params: NamedParams) -> torch.optim.Optimizer:
        sources: list[int] = []
        groups: list[dict[str, Any]] = []
        for _, param in named_params:
            index = group_of[id(param)]
            if index not in sources:
                sources.append(index)
                groups.append({"params": []})
            groups[sources.index(index)]["params"].append(param)
        for source, group in zip(sources, groups):
            group.update({k: v for k, v in optimizer.param_groups[source].items() if k != "params"})
        bucket_optimizer = type(optimizer)(groups, **optimizer.defaults)

        def mirror(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            for source, group in zip(sources, opt.param_groups):
                group.update({k: v for k, v in optimizer.param_groups[source].items() if k != "params"})

        bucket_optimizer.register_step_pre_hook(mirror)
        return bucket_optimizer

    return optim_fn
