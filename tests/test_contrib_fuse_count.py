"""The fused count (``fuse_state_of(optimizer).fused_count``, the original's ``optimizer._bagua_fused_count``,
kept by ``bagua.torch_api.contrib``) counts as the original's: +1 per param group and fused step in which
some parameters were fused. With a bagua-wrapped module the optimizer's flat layout fuses only while the
module's buckets are not flattened (``with_bagua(..., do_flatten=False)``); buckets that are flattened own
the layout and nothing is fused (count 0). The weights equal the unfused run's in every case."""

from __future__ import annotations

import torch

from bagua_contrib.fused_optimizer import fuse_optimizer, fuse_state_of
from tests.distributed import run_workers

STEPS = 7  # fused on steps 0, 2, 4, 6: four fused steps
GROUPS = 2


def _model_and_optimizer(optimizer_cls: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Sigmoid(), torch.nn.Linear(3, 1), torch.nn.Sigmoid())
    groups = [{"params": [p for n, p in model.named_parameters() if "bias" not in n], "weight_decay": 0.1},
              {"params": [p for n, p in model.named_parameters() if "bias" in n], "weight_decay": 0.0}]
    if optimizer_cls == "qadam":
        from bagua_algorithms.q_adam import QAdamOptimizer

        return model, QAdamOptimizer(groups, lr=0.01, warmup_steps=2)
    return model, torch.optim.Adam(groups, lr=0.01, amsgrad=True)


def _algorithm(name: str, optimizer):
    if name == "qadam":
        from bagua_algorithms.q_adam import QAdamAlgorithm

        return QAdamAlgorithm(optimizer, hierarchical=False)
    return {"name": name, "hierarchical": False}


def _train(name: str, fuse: bool, optimizer_flatten: bool, bagua_flatten: bool, fuse_first: bool):
    model, optimizer = _model_and_optimizer("qadam" if name == "qadam" else "adam")
    if fuse and fuse_first:
        fuse_optimizer(optimizer, do_flatten=optimizer_flatten)
    model = model.with_bagua([optimizer], _algorithm(name, optimizer), do_flatten=bagua_flatten)
    if fuse and not fuse_first:
        fuse_optimizer(optimizer, do_flatten=optimizer_flatten)
    x = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]).reshape(3, 2)
    for step in range(STEPS):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.fuse_step() if fuse and step % 2 == 0 else optimizer.step()
    model.bagua_shutdown()
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    state = fuse_state_of(optimizer)
    return weights, state.fused_count if state is not None else None


def _counts(rank: int) -> dict:
    out = {}
    cases = {
        "gradient_allreduce": [(True, False, True), (True, True, True), (False, True, True)],
        "decentralized": [(True, False, True), (True, True, True), (False, True, True)],
        "qadam": [(True, False, False)],  # fused after wrapping, as the original's qadam check
    }
    for name, flags in cases.items():
        reference, _ = _train(name, False, False, False, True)
        for optimizer_flatten, bagua_flatten, fuse_first in flags:
            weights, count = _train(name, True, optimizer_flatten, bagua_flatten, fuse_first)
            out[(name, optimizer_flatten, bagua_flatten)] = (count, torch.equal(weights, reference))
    return out


def test_fused_count_with_bagua_module() -> None:
    (result,) = run_workers(_counts, 1, timeout=180)
    fused_steps = len(range(0, STEPS, 2))
    for (name, optimizer_flatten, bagua_flatten), (count, same) in result.items():
        expected = GROUPS * fused_steps if optimizer_flatten and not bagua_flatten else 0
        assert count == expected, (name, optimizer_flatten, bagua_flatten, count)
        assert same, f"{name}: fused weights differ from the unfused run"
