"""``low_precision_decentralized``: after each optimizer step, exchange compressed weight
differences with the two ring neighbours.

Every bucket (default bucket size, effective tensors = the weights) keeps the replicas ``w``, ``l``,
``r``; after the optimizer step of a communication step (``t % communication_interval == 0``) the
stepped weights x become ``w + D(C(x + l/3 + r/3 - 5/3 w))`` (see
``bagua_core.bucket_ops.low_precision_decentralized``). Communicated: one MinMaxUInt8-compressed
copy of each bucket (uint8 payload plus its fp32 min/max) to each ring neighbour. The training thread
computes each bucket's difference pass while the communication thread exchanges the buckets before it. Hierarchical:
averaged inside the node first, the ring runs among the node leaders, broadcast inside the node.

Example::

    >>> model = model.with_bagua([optimizer], LowPrecisionDecentralizedAlgorithm(hierarchical=False))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from pydantic import field_validator

from bagua_algorithms.decentralized.common import WeightCommunicatingImpl, check_positive_int, is_communication_step
from bagua_core.algorithm import Algorithm, AlgorithmConfig
from bagua_core.bucket import BaguaBucket

__all__ = [
    "LowPrecisionDecentralizedAlgorithm",
    "LowPrecisionDecentralizedAlgorithmImpl",
    "LowPrecisionDecentralizedConfig",
]


class LowPrecisionDecentralizedConfig(AlgorithmConfig):
    name: Literal["low_precision_decentralized"] = "low_precision_decentralized"
    hierarchical: bool = True
    """Average inside each node first; the ring then runs among the nodes."""
    communication_interval: int = 1
    """Communicate every this many training steps (steps t with t % communication_interval == 0)."""

    _check_interval = field_validator("communication_interval", mode="before")(check_positive_int)


class LowPrecisionDecentralizedAlgorithmImpl(WeightCommunicatingImpl):
    def __init__(self, process_group, hierarchical: bool, communication_interval: int) -> None:
        super().__init__(process_group)
        self.hierarchical = hierarchical
        self.communication_interval = communication_interval
        self._stepped = 0
        self._ops: dict[int, object] = {}  # id(bucket) -> its operation

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        self._ops = {}  # buckets are being rebuilt
        return super().init_tensors(bagua_module)

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        bucket.clear_ops()
        op = bucket.append_low_precision_decentralized_synchronous_op(self.hierarchical, self.process_group)
        self._ops[id(bucket)] = op

    def init_forward_pre_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook(inputs) -> None:
            self._stepped = 0

        return hook

    def init_post_backward_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook() -> None:
            return None

        return hook

    def init_post_optimizer_step_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook(optimizer: torch.optim.Optimizer) -> None:
            # with several optimizers, communicate once all of them have stepped
            self._stepped += 1
            if self._stepped != len(bagua_module.bagua_optimizers):
                return
            if not is_communication_step(bagua_module, self.communication_interval):
                return
            for bucket in bagua_module.bagua_buckets:
                op = self._ops.get(id(bucket))
                if op is not None:  # the difference pass here, while the buckets before it are on the wire
                    op.prepare(bucket)
                for tensor in bucket.tensors:
                    tensor.bagua_mark_communication_ready()
            bagua_module.bagua_wait_for_communication()

        return hook


class LowPrecisionDecentralizedAlgorithm(Algorithm):
    """Decentralized SGD with compressed (MinMaxUInt8) ring communication of weight differences."""

    name = "low_precision_decentralized"
    Config = LowPrecisionDecentralizedConfig

    def __init__(self, hierarchical: bool = True, communication_interval: int = 1) -> None:
        super().__init__(hierarchical=hierarchical, communication_interval=communication_interval)

    def reify(self, process_group) -> LowPrecisionDecentralizedAlgorithmImpl:
        c = self.config
        return LowPrecisionDecentralizedAlgorithmImpl(process_group, c.hierarchical, c.communication_interval)
