"""What the weight-communicating algorithms share (decentralized, low_precision_decentralized): the weights
as effective tensors, the communication interval and its option check."""

from __future__ import annotations

from collections.abc import Callable

import torch
from pydantic import ValidationInfo

from bagua_core.api import AlgorithmImpl, WrappedModule, tensors

__all__ = ["WeightCommunicatingImpl", "check_positive_int", "is_communication_step", "weight_tensors"]


def check_positive_int(value: object, info: ValidationInfo) -> int:
    """A pydantic "before" validator: a positive int (not a bool), with a message naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{info.field_name} must be a positive integer, got {value!r}")
    return value


class WeightCommunicatingImpl(AlgorithmImpl):
    """Base of the decentralized impls: they communicate the weights, so a gradient becoming ready
    triggers nothing."""

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        return weight_tensors(bagua_module)

    def init_backward_hook(self, bagua_module: torch.nn.Module) -> Callable[[str, torch.nn.Parameter], None]:
        return lambda parameter_name, parameter: None


def weight_tensors(bagua_module: torch.nn.Module) -> list[torch.Tensor]:
    """The module's parameters as bagua tensors whose effective tensor is the parameter itself, in
    reverse registration order (as the original and the gradient algorithms: it decides the layout of
    the weight buckets, and past one bucket which parameters share a min/max)."""
    wrapped = WrappedModule(bagua_module)
    return [tensors.mark(param, name, wrapped.module_name) for name, param in reversed(wrapped.build_params())]


def is_communication_step(bagua_module: torch.nn.Module, communication_interval: int) -> bool:
    """Whether the current step t (the train step counter - 1) communicates."""
    return (WrappedModule(bagua_module).train_step_counter - 1) % communication_interval == 0
