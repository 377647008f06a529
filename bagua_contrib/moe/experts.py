"""The experts of one rank: ``num_local_experts`` independent copies of an expert module."""

from __future__ import annotations

import copy

import torch

from bagua_contrib.moe.utils import mark_moe_param

__all__ = ["Experts"]


class Experts(torch.nn.Module):
    """Local experts; their parameters are marked as expert parameters (see ``is_moe_param``).

    ``forward`` takes ``(world_size, num_local_experts, capacity, d_model)`` tokens and gives local
    expert ``i`` the slice ``[:, i]``.
    """

    def __init__(self, expert: torch.nn.Module, num_local_experts: int = 1) -> None:
        super().__init__()
        if not isinstance(num_local_experts, int) or num_local_experts < 1:
            raise ValueError(f"num_local_experts must be a positive integer, got {num_local_experts!r}")
        self.num_local_experts = num_local_experts
        self.deepspeed_experts = torch.nn.ModuleList([copy.deepcopy(expert) for _ in range(num_local_experts)])
        for param in self.parameters():
            mark_moe_param(param)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        chunks = inputs.chunk(self.num_local_experts, dim=1)
        outputs = [expert(chunk) for chunk, expert in zip(chunks, self.deepspeed_experts, strict=True)]
        return torch.cat(outputs, dim=1)
