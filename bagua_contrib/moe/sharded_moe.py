"""``TopKGate`` and ``MOELayer``: experts sharded over ranks, tokens exchanged with alltoall.

Per forward, with ``E = world_size * num_local_experts`` experts and capacity ``C``: the capacity is
agreed over ranks (allreduce MAX of one int64), tokens are dispatched into ``[E, C, d_model]``
(einsum), an alltoall sends each rank's slots for rank ``j``'s experts to rank ``j`` (input dtype), the
local experts run, a second alltoall sends the outputs back, and they are combined with the gate
weights. Backward runs the two alltoalls in reverse. Collectives run on the process group's
communication thread (ordered with bucket operations); works on gloo.

Example::

    >>> gate = TopKGate(model_dim=16, num_experts=4, k=2)
    >>> layer = MOELayer(gate, Experts(torch.nn.Linear(16, 16), num_local_experts=2), num_local_experts=2)
    >>> out = layer(torch.randn(8, 16)); loss = out.sum() + layer.l_aux
"""

from __future__ import annotations

from typing import Any

import torch

import bagua_core
from bagua_contrib.moe.experts import Experts
from bagua_contrib.moe.gating import capacity, multiplicative_jitter, top1gating, top2gating
from bagua_contrib.utils.ordered import GroupRef, default_group, run_ordered

__all__ = ["MOELayer", "TopKGate"]

NOISY_GATE_POLICIES = (None, "None", "Jitter", "RSample")


def _alltoall(tensor: torch.Tensor, group: Any) -> torch.Tensor:
    out = torch.empty_like(tensor)
    bagua_core.alltoall(tensor, out, comm=group.get_global_communicator())
    return out


def _agree_max(value: int, group: Any) -> int:
    tensor = torch.tensor([value], dtype=torch.int64)
    bagua_core.allreduce_inplace(tensor, op=bagua_core.ReduceOp.MAX, comm=group.get_global_communicator())
    return int(tensor.item())


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, tensor):
        ctx.group = group
        return run_ordered(group, _alltoall, tensor.contiguous(), group)

    @staticmethod
    def backward(ctx, grad):
        return None, run_ordered(ctx.group, _alltoall, grad.contiguous(), ctx.group)


class TopKGate(torch.nn.Module):
    """Linear gate (fp32, no bias) choosing ``k`` (1 or 2) experts per token, with capacity
    ``capacity_factor`` (``eval_capacity_factor`` in eval) times the fair share, at least
    ``min_capacity``. ``noisy_gate_policy``: ``None``, ``"Jitter"`` (multiplicative input noise in
    training) or ``"RSample"`` (Gumbel-noised expert choice in training)."""

    def __init__(self, model_dim: int, num_experts: int, k: int = 1, capacity_factor: float = 1.0,
                 eval_capacity_factor: float = 1.0, min_capacity: int = 4, noisy_gate_policy: str | None = None) -> None:
        super().__init__()
        if k not in (1, 2):
            raise ValueError(f"k must be 1 or 2 (top-1 or top-2 gating), got {k!r}")
        for name, value in (("capacity_factor", capacity_factor), ("eval_capacity_factor", eval_capacity_factor)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if not isinstance(min_capacity, int) or min_capacity < 0:
            raise ValueError(f"min_capacity must be a non-negative integer, got {min_capacity!r}")
        if noisy_gate_policy not in NOISY_GATE_POLICIES:
            raise ValueError(f"noisy_gate_policy must be one of {NOISY_GATE_POLICIES}, got {noisy_gate_policy!r}")
        self.wg = torch.nn.Linear(model_dim, num_experts, bias=False).float()
        self.k, self.num_experts = k, num_experts
        self.capacity_factor, self.eval_capacity_factor = capacity_factor, eval_capacity_factor
        self.min_capacity = min_capacity
        self.noisy_gate_policy = None if noisy_gate_policy == "None" else noisy_gate_policy
        self.group_ref = GroupRef()  # set by MOELayer: the capacity is agreed over its ranks

    def capacity(self, num_tokens: int) -> int:
        factor = self.capacity_factor if self.training else self.eval_capacity_factor
        cap = capacity(num_tokens, self.num_experts, factor * self.k, self.min_capacity)
        group = self.group_ref.get() if self.num_experts > 1 else None
        if group is not None and group.get_global_communicator().nranks() > 1:
            cap = run_ordered(group, _agree_max, cap, group)
        return cap

    def forward(self, input: torch.Tensor, used_token: torch.Tensor | None = None):  # noqa: A002 (documented name)
        tokens = input.float()
        policy = self.noisy_gate_policy if self.training else None
        if policy == "Jitter":
            tokens = multiplicative_jitter(tokens, tokens.device)
        logits = self.wg(tokens)
        cap = self.capacity(tokens.shape[0])
        factor = self.capacity_factor if self.training else self.eval_capacity_factor
        if self.k == 1:
            return top1gating(logits, factor, self.min_capacity, used_token, policy, agreed_capacity=cap)
        return top2gating(logits, factor, noisy_gate_policy=policy, agreed_capacity=cap)


class MOELayer(torch.nn.Module):
    """Gate + sharded experts. After a forward, ``l_aux`` (load-balancing loss) and ``exp_counts``
    (tokens routed to each expert, before dropping) describe it."""

    def __init__(self, gate: TopKGate, experts: Experts, num_local_experts: int, group: Any = None) -> None:
        super().__init__()
        self.gate, self.experts = gate, experts
        self.group_ref = GroupRef(default_group(group))
        group = self.group_ref.group
        self.world_size = group.get_global_communicator().nranks() if group is not None else 1
        self.num_local_experts = num_local_experts
        if gate.num_experts != self.world_size * num_local_experts:
            raise ValueError(f"the gate has {gate.num_experts} experts, expected world_size ({self.world_size}) x "
                             f"num_local_experts ({num_local_experts})")
        gate.group_ref = self.group_ref
        self.l_aux: torch.Tensor | None = None
        self.exp_counts: torch.Tensor | None = None

    def forward(self, *input: torch.Tensor, **kwargs: Any) -> torch.Tensor:  # noqa: A002 (documented name)
        """``forward(hidden_states, used_token=None)``: route the tokens of ``hidden_states``."""
        hidden_states = input[0]
        used_token = input[1] if len(input) > 1 else kwargs.get("used_token")
        d_model = hidden_states.shape[-1]
        tokens = hidden_states.reshape(-1, d_model)
        self.l_aux, combine_weights, dispatch_mask, self.exp_counts = self.gate(tokens, used_token)
        dispatched = torch.einsum("sec,sm->ecm", dispatch_mask.type_as(tokens), tokens)
        group = self.group_ref.get() if self.world_size > 1 else None
        if group is not None:
            dispatched = _AllToAll.apply(group, dispatched)
        expert_out = self.experts(dispatched.reshape(self.world_size, self.num_local_experts, -1, d_model))
        if group is not None:
            expert_out = _AllToAll.apply(group, expert_out)
        expert_out = expert_out.reshape(self.world_size * self.num_local_experts, -1, d_model)
        combined = torch.einsum("sec,ecm->sm", combine_weights.type_as(tokens), expert_out)
        return combined.reshape(hidden_states.shape)
