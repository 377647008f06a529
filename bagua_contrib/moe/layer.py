"""``MoE``: the user-facing mixture-of-experts layer (experts sharded over the ranks of bagua's group).

Example (on every rank)::

    >>> expert = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    >>> moe = MoE(hidden_size=16, expert=expert, num_local_experts=2, k=2)
    >>> output, l_aux, exp_counts = moe(hidden_states)      # hidden_states: (..., 16)
    >>> loss = task_loss(output) + 0.01 * l_aux
"""

from __future__ import annotations

from typing import Any

import torch

from bagua_contrib.moe.experts import Experts
from bagua_contrib.moe.sharded_moe import MOELayer, TopKGate
from bagua_contrib.utils.ordered import default_group

__all__ = ["MoE"]


class MoE(torch.nn.Module):
    """``num_local_experts`` copies of ``expert`` on each rank (``world_size * num_local_experts`` in
    all), a top-``k`` gate, and dropout (``output_dropout_prob``) on the output. ``forward`` returns
    ``(output, l_aux, exp_counts)``. Ranks must build their experts independently (different seeds)."""

    def __init__(self, hidden_size: int, expert: torch.nn.Module, num_local_experts: int = 1, k: int = 1,
                 output_dropout_prob: float = 0.0, capacity_factor: float = 1.0, eval_capacity_factor: float = 1.0,
                 min_capacity: int = 4, noisy_gate_policy: str | None = None, process_group: Any = None) -> None:
        super().__init__()
        if not 0.0 <= output_dropout_prob < 1.0:
            raise ValueError(f"output_dropout_prob must be in [0, 1), got {output_dropout_prob!r}")
        group = default_group(process_group)
        world_size = group.get_global_communicator().nranks() if group is not None else 1
        self.num_experts = num_local_experts * world_size
        gate = TopKGate(hidden_size, self.num_experts, k, capacity_factor, eval_capacity_factor, min_capacity,
                        noisy_gate_policy)
        self.deepspeed_moe = MOELayer(gate, Experts(expert, num_local_experts), num_local_experts, group)
        self.dropout = torch.nn.Dropout(output_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, used_token: torch.Tensor | None = None):
        output = self.dropout(self.deepspeed_moe(hidden_states, used_token))
        return output, self.deepspeed_moe.l_aux, self.deepspeed_moe.exp_counts
