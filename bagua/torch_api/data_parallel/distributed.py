"""``DistributedDataParallel(module, ..., optimizers=[], algorithm=GradientAllReduceAlgorithm())``.

A thin adapter: the documented default algorithm (the core names no algorithm); the wrapper is
``bagua_contrib.ddp.DistributedDataParallel``. ``DistributedDataParallel_V1_9_0`` is the class the
original's function returns (torch 1.9's DDP interface), which its own tests construct directly."""

from __future__ import annotations

from typing import Any

import torch

from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm
from bagua_contrib.ddp import DistributedDataParallel as _DistributedDataParallel
from bagua_contrib.ddp import to_bagua_process_group

__all__ = ["DistributedDataParallel", "DistributedDataParallel_V1_9_0", "to_bagua_process_group"]


def DistributedDataParallel(  # noqa: N802 (the documented name)
    module: torch.nn.Module,
    device_ids: Any = None,
    output_device: Any = None,
    dim: int = 0,
    broadcast_buffers: bool = True,
    process_group: Any = None,
    bucket_cap_mb: int = 25,
    find_unused_parameters: bool = False,
    check_reduction: bool = False,
    gradient_as_bucket_view: bool = True,
    optimizers: list = [],  # noqa: B006 (the documented default; never mutated)
    algorithm: Any = GradientAllReduceAlgorithm(),  # noqa: B008 (the documented default; never mutated)
) -> _DistributedDataParallel:
    """Wrap ``module`` like torch's DDP, communicating with ``algorithm``. See
    ``bagua_contrib.ddp.DistributedDataParallel``."""
    return DistributedDataParallel_V1_9_0(
        module, device_ids, output_device, dim, broadcast_buffers, process_group, bucket_cap_mb,
        find_unused_parameters, check_reduction, gradient_as_bucket_view, list(optimizers), algorithm,
    )


class DistributedDataParallel_V1_9_0(_DistributedDataParallel):  # noqa: N801 (the original's name)
    """The wrapper with torch 1.9's DDP arguments, then ``optimizers`` and ``algorithm`` (default
    ``GradientAllReduceAlgorithm()``, as the original's)."""

    def __init__(
        self,
        module: torch.nn.Module,
        device_ids: Any = None,
        output_device: Any = None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group: Any = None,
        bucket_cap_mb: int = 25,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = True,
        optimizers: list = [],  # noqa: B006 (the documented default; never mutated)
        algorithm: Any = GradientAllReduceAlgorithm(),  # noqa: B008 (the documented default; never mutated)
    ) -> None:
        super().__init__(
            module, device_ids, output_device, dim, broadcast_buffers, process_group, bucket_cap_mb,
            find_unused_parameters, check_reduction, gradient_as_bucket_view, list(optimizers), algorithm,
        )
