"""MoE on 2 gloo ranks (experts sharded, alltoall) equals a single-process computation with every
expert: outputs, input/gate/expert gradients; top-1 and top-2; gating semantics; is_moe_param."""

from __future__ import annotations

import copy

import pytest
import torch

from bagua_contrib.moe import MoE, TopKGate, ignore_moe_params, is_moe_param
from bagua_contrib.moe.gating import top1gating, top2gating
from tests.distributed import run_workers

D, LOCAL = 6, 2


def _expert(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(D, 8), torch.nn.Tanh(), torch.nn.Linear(8, D))


def _check(rank: int, k: int, capacity_factor: float) -> dict:
    world = 2
    torch.manual_seed(123)  # same gate on both ranks
    moe = MoE(D, _expert(0), num_local_experts=LOCAL, k=k, capacity_factor=capacity_factor, min_capacity=1)
    experts = [_expert(100 + e) for e in range(world * LOCAL)]  # global expert e
    for i, local in enumerate(moe.deepspeed_moe.experts.deepspeed_experts):
        local.load_state_dict(experts[rank * LOCAL + i].state_dict())
    assert all(is_moe_param(p) for p in moe.deepspeed_moe.experts.parameters())
    assert not is_moe_param(moe.deepspeed_moe.gate.wg.weight)
    ref_gate = copy.deepcopy(moe.deepspeed_moe.gate)
    assert ref_gate.group_ref is moe.deepspeed_moe.gate.group_ref  # shared, not copied
    ref_gate.group_ref = type(ref_gate.group_ref)()  # the reference agrees on nothing

    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(3, 4, D, generator=gen, requires_grad=True)
    g = torch.randn(3, 4, D, generator=gen)
    out, l_aux, counts = moe(x)
    ((out * g).sum() + l_aux).backward()

    # reference: every expert here, the same gate decisions on this rank's tokens
    xr = x.detach().clone().requires_grad_()
    tokens = xr.reshape(-1, D)
    ref_l_aux, combine, _, ref_counts = ref_gate(tokens)
    weights = combine.sum(-1)  # [S, E]: the gate weight of each token for each expert (0 if dropped)
    ref = sum(weights[:, e:e + 1] * experts[e](tokens) for e in range(world * LOCAL)).reshape(x.shape)
    ((ref * g).sum() + ref_l_aux).backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(moe.deepspeed_moe.gate.wg.weight.grad, ref_gate.wg.weight.grad)
    assert torch.equal(counts, ref_counts) and int(counts.sum()) == 12 * 1
    import bagua_core as bagua

    for expert in experts:  # each expert's gradient = the sum of every rank's contribution
        for p in expert.parameters():
            bagua.allreduce_inplace(p.grad)
    for i, local in enumerate(moe.deepspeed_moe.experts.deepspeed_experts):
        for p, ref_p in zip(local.parameters(), experts[rank * LOCAL + i].parameters(), strict=True):
            torch.testing.assert_close(p.grad, ref_p.grad)
    kept = (weights > 0).sum().item()
    wrapped = ignore_moe_params(torch.nn.Sequential(moe))
    assert len(wrapped._bagua_params_and_buffers_to_ignore) == 4 * LOCAL
    return {"kept": kept, "tokens": tokens.shape[0]}


def _all(rank: int) -> list[dict]:
    return [_check(rank, k, cf) for k, cf in ((1, 4.0), (2, 4.0), (1, 0.5), (2, 0.5))]


def test_moe_two_ranks_equals_single_process() -> None:
    results = run_workers(_all, 2)
    for per_rank in results:
        assert per_rank[0]["kept"] == 12 and per_rank[1]["kept"] == 24  # ample capacity: nothing dropped
        assert per_rank[2]["kept"] < 12 and per_rank[3]["kept"] < 24  # capacity 0.5: tokens dropped


def test_gating_semantics() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [0.5, 0.1, 0.0], [3.0, 0.0, 2.5]])
    probs = logits.softmax(1)
    _, combine, dispatch, counts = top1gating(logits, 1.0, 0, agreed_capacity=1)
    assert counts.tolist() == [3, 1, 0]
    assert torch.allclose(combine.sum((1, 2)), torch.tensor([probs[0, 0], probs[1, 1], 0.0, 0.0]))  # cap 1
    assert dispatch[0, 0, 0] and dispatch[1, 1, 0]
    # the documented capacities: top-1 max(ceil(S/E * factor), min_capacity), top-2 ceil(2S/E * factor)
    assert top1gating(logits, 0.75, 1)[1].shape == (4, 3, 1) and top1gating(logits, 0.75, 2)[1].shape == (4, 3, 2)
    assert top2gating(logits, 1.0)[1].shape == (4, 3, 3)
    _, combine, _, _ = top2gating(logits, 1.0, agreed_capacity=4)
    assert torch.allclose(combine.sum((1, 2)), torch.ones(4))  # two experts, renormalised
    assert torch.allclose(combine[3].sum(-1), torch.tensor([probs[3, 0], 0, probs[3, 2]]) / (probs[3, 0] + probs[3, 2]))
    with pytest.raises(ValueError, match="k must be 1 or 2"):
        TopKGate(4, 2, k=3)
    with pytest.raises(ValueError, match="noisy_gate_policy must be one of"):
        TopKGate(4, 2, noisy_gate_policy="Gauss")
    moe = MoE(4, torch.nn.Linear(4, 4), num_local_experts=3, k=2, noisy_gate_policy="RSample")
    out, l_aux, counts = moe(torch.randn(5, 4))  # single process: all experts local, no communication
    assert out.shape == (5, 4) and l_aux.dim() == 0 and counts.shape == (3,)
