"""Top-1 and top-2 gating with expert capacity (the DeepSpeed/GShard design).

``S`` tokens, ``E`` experts, capacity ``C`` (top-1: ``max(ceil(S/E * capacity_factor), min_capacity)``,
top-2: ``ceil(2S/E * capacity_factor)``, as the original; ``agreed_capacity=`` overrides it with the
value the MoE layer agreed over its ranks). Each returns ``(l_aux, combine_weights [S, E, C],
dispatch_mask [S, E, C], exp_counts [E])``. Tokens beyond an expert's capacity are dropped, first come
first served (deterministic; no random token selection).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["capacity", "gumbel_rsample", "multiplicative_jitter", "top1gating", "top2gating"]


def capacity(num_tokens: int, num_experts: int, capacity_factor: float, min_capacity: int) -> int:
    """``max(ceil(num_tokens / num_experts * capacity_factor), min_capacity)``."""
    return max(math.ceil(num_tokens / num_experts * capacity_factor), min_capacity)


def gumbel_rsample(shape: tuple, device: torch.device) -> torch.Tensor:
    """Samples of the standard Gumbel distribution, of ``shape``, on ``device``."""
    uniform = torch.rand(shape, device=device).clamp(1e-10, 1 - 1e-10)
    return -torch.log(-torch.log(uniform))


def multiplicative_jitter(x: torch.Tensor, device: torch.device, epsilon: float = 1e-2) -> torch.Tensor:
    """``x`` times uniform noise in ``[1 - epsilon, 1 + epsilon]`` (the "Jitter" gate policy)."""
    if epsilon == 0:
        return x
    return x * torch.empty(x.shape, device=device, dtype=x.dtype).uniform_(1 - epsilon, 1 + epsilon)


_gumbel = gumbel_rsample


def _one_hot_locations(locations: torch.Tensor, cap: int) -> torch.Tensor:
    return F.one_hot(locations, num_classes=cap).float()


def top1gating(logits: torch.Tensor, capacity_factor: float, min_capacity: int, used_token: torch.Tensor | None = None,
               noisy_gate_policy: str | None = None, *, agreed_capacity: int | None = None):
    """Each token goes to its most probable expert (``RSample``: chosen with Gumbel noise)."""
    cap = agreed_capacity or capacity(logits.shape[0], logits.shape[1], capacity_factor, min_capacity)
    gates = F.softmax(logits, dim=1)
    choice = logits + _gumbel(logits.shape, logits.device) if noisy_gate_policy == "RSample" else gates
    num_experts = gates.shape[1]
    mask1 = F.one_hot(torch.argmax(choice, dim=1), num_classes=num_experts)
    if used_token is not None:
        mask1 = torch.einsum("s,se->se", used_token, mask1)
    exp_counts = mask1.sum(0).detach().cpu()
    l_aux = torch.sum(gates.mean(0) * mask1.float().mean(0)) * num_experts
    locations1 = torch.cumsum(mask1, dim=0) - 1
    mask1 = mask1 * torch.lt(locations1, cap)
    locations1_s = torch.sum(locations1 * mask1, dim=1)
    gates = gates * mask1.float()
    combine_weights = torch.einsum("se,sc->sec", gates, _one_hot_locations(locations1_s, cap))
    return l_aux, combine_weights, combine_weights.bool(), exp_counts


def top2gating(logits: torch.Tensor, capacity_factor: float, *, noisy_gate_policy: str | None = None,
               agreed_capacity: int | None = None):
    """Each token goes to its two most probable experts, weights renormalised to sum to 1
    (``RSample``: the second expert is chosen with Gumbel noise)."""
    cap = agreed_capacity or capacity(logits.shape[0], logits.shape[1], capacity_factor * 2, 0)
    gates = F.softmax(logits, dim=1)
    num_experts = gates.shape[1]
    mask1 = F.one_hot(torch.argmax(gates, dim=1), num_classes=num_experts)
    second = logits + _gumbel(logits.shape, logits.device) if noisy_gate_policy == "RSample" else logits
    mask2 = F.one_hot(torch.argmax(second.masked_fill(mask1.bool(), float("-inf")), dim=1), num_classes=num_experts)
    locations1 = torch.cumsum(mask1, dim=0) - 1
    locations2 = torch.cumsum(mask2, dim=0) - 1 + torch.sum(mask1, dim=0, keepdim=True)
    exp_counts = mask1.sum(0).detach().cpu()
    l_aux = torch.mean(gates.mean(0) * mask1.float().mean(0)) * num_experts * num_experts
    mask1 = mask1 * torch.lt(locations1, cap)
    mask2 = mask2 * torch.lt(locations2, cap)
    locations1_s = torch.sum(locations1 * mask1, dim=1)
    locations2_s = torch.sum(locations2 * mask2, dim=1)
    gates1_s = torch.einsum("se,se->s", gates, mask1.float())
    gates2_s = torch.einsum("se,se->s", gates, mask2.float())
    denom = torch.clamp(gates1_s + gates2_s, min=torch.finfo(gates.dtype).eps)
    gates1 = torch.einsum("s,se->se", gates1_s / denom, mask1.float())
    gates2 = torch.einsum("s,se->se", gates2_s / denom, mask2.float())
    combine_weights = (torch.einsum("se,sc->sec", gates1, _one_hot_locations(locations1_s, cap))
                       + torch.einsum("se,sc->sec", gates2, _one_hot_locations(locations2_s, cap)))
    return l_aux, combine_weights, combine_weights.bool(), exp_counts
