"""qadam: equal to torch.optim.Adam on the averaged gradient through the warmup (including the step
that ends it), then compressed momentum averaging: ranks identical, the momentum within two
quantisation steps of the exact mean of the local momenta (weight decay included), v frozen."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_core.api import tensors

from bagua_algorithms.q_adam import QAdamAlgorithm, QAdamOptimizer
from tests.distributed import run_workers
from tests.models import SmallNet, batch

WARMUP, STEPS, LR, WD, BETAS = 3, 6, 0.01, 0.1, (0.9, 0.999)


def _gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor.contiguous())
    return out


def _run(rank: int, by_name: bool, hierarchical: bool) -> None:
    n = dist.get_world_size()
    model = SmallNet(seed=rank)
    optimizer = QAdamOptimizer(model.parameters(), lr=LR, warmup_steps=WARMUP, betas=BETAS, weight_decay=WD)
    algorithm = {"name": "qadam", "hierarchical": hierarchical} if by_name else QAdamAlgorithm(optimizer, hierarchical=hierarchical)
    model = model.with_bagua([optimizer], algorithm)
    assert model.bagua_algorithm.optimizer is optimizer
    reference = SmallNet(seed=0)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=LR, betas=BETAS, weight_decay=WD, foreach=False)
    params = list(model.parameters())
    for t in range(STEPS):
        x, y = batch(rank, t)
        if t < WARMUP:  # reference: Adam on the exactly averaged gradient
            ref_opt.zero_grad()
            F.cross_entropy(reference(x), y).backward()
            for p in reference.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(n)
            ref_opt.step()
        m_prev = [optimizer.state[p]["exp_avg"].clone() for p in params]
        v_prev = [optimizer.state[p]["exp_avg_sq"].clone() for p in params]
        p_prev = [p.detach().clone() for p in params]
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if t >= WARMUP:  # the momentum was updated locally and averaged, compressed, during backward
            local = torch.cat([m0.lerp(p.grad + WD * w, 1 - BETAS[0]).reshape(-1) for p, m0, w in zip(params, m_prev, p_prev)])
            everyone = _gather(local)
            step = max(float(e.max() - e.min()) for e in everyone) / 255  # chunks are parts of the bucket
            actual = torch.cat([optimizer.state[p]["exp_avg"].reshape(-1) for p in params])
            error = (actual - sum(everyone) / n).abs().max().item()
            assert error <= 2 * step + 1e-7, (t, error, step)
        optimizer.step()
        if t < WARMUP:
            for ours, theirs in zip(params, reference.parameters()):
                torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7, msg=lambda m, t=t: f"step {t}: {m}")
        else:
            k = t + 1
            for p, w, v0 in zip(params, p_prev, v_prev):
                v, m = optimizer.state[p]["exp_avg_sq"], optimizer.state[p]["exp_avg"]
                assert torch.equal(v, v0)  # frozen
                expected = w - LR / (1 - BETAS[0] ** k) * m / (v.sqrt() / (1 - BETAS[1] ** k) ** 0.5 + 1e-8)
                torch.testing.assert_close(p.detach(), expected, rtol=1e-6, atol=1e-7)
                everyone = _gather(p.detach())
                assert all(torch.equal(everyone[0], e) for e in everyone)  # ranks identical
    assert optimizer.step_id == STEPS
    assert tensors.effective(model.bagua_buckets[0].tensors[0]) is optimizer.state[params[-1]]["exp_avg"]


@pytest.mark.parametrize("world_size,local_size,by_name,hierarchical", [(2, 2, True, False), (4, 2, False, True)])
def test_qadam(world_size: int, local_size: int, by_name: bool, hierarchical: bool) -> None:
    run_workers(_run, world_size, by_name, hierarchical, local_size=local_size)


def test_single_process_without_algorithm_updates_momentum_itself() -> None:
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(5))
    optimizer = QAdamOptimizer([p], lr=0.1, warmup_steps=1, weight_decay=0.5)
    for _ in range(3):
        optimizer.zero_grad()
        (p**2).sum().backward()
        m_before, v_before = optimizer.state[p]["exp_avg"].clone(), optimizer.state[p]["exp_avg_sq"].clone()
        optimizer.step()
    torch.testing.assert_close(optimizer.state[p]["exp_avg_sq"], v_before)
    assert not torch.equal(optimizer.state[p]["exp_avg"], m_before)
    state = optimizer.state_dict()
    again = QAdamOptimizer([p], lr=0.1, warmup_steps=1)
    again.load_state_dict(state)
    assert again.step_id == 3


def test_bad_optimizer_options() -> None:
    p = [torch.nn.Parameter(torch.zeros(1))]
    for kwargs, field in [({"warmup_steps": -1}, "warmup_steps"), ({"lr": -1.0}, "lr"), ({"betas": (1.0, 0.9)}, "betas")]:
        with pytest.raises(ValueError, match=field):
            QAdamOptimizer(p, **kwargs)


class _Branches(torch.nn.Module):
    """``b`` joins the forward from the second step on: a parameter newly used inside qadam's warmup."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.use_b = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + (self.b(x) if self.use_b else 0)


def _newly_used_in_warmup(rank: int) -> list[float]:
    from bagua_core.lifecycle.module_state import state_of

    model = _Branches()
    optimizer = QAdamOptimizer(model.parameters(), lr=LR, warmup_steps=10)
    model = model.with_bagua([optimizer], "qadam")
    state_of(model).unused.enabled = True  # what DistributedDataParallel(find_unused_parameters=True) sets
    errors = []
    for t in range(2):
        model.use_b = t == 1
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(10 * rank + t))
        local = _Branches()
        local.use_b = model.use_b
        local.load_state_dict({k: v for k, v in model.state_dict().items()})
        local(x).square().mean().backward()
        optimizer.zero_grad()
        model(x).square().mean().backward()
        for mine, theirs in zip(model.parameters(), local.parameters()):
            if theirs.grad is None:
                continue
            expected = theirs.grad.clone()
            dist.all_reduce(expected)
            errors.append(float((mine.grad - expected / dist.get_world_size()).abs().max()))
        optimizer.step()
    return errors


def test_a_parameter_newly_used_in_warmup_is_averaged_as_in_warmup() -> None:
    """With find_unused_parameters, a parameter that joins the backward inside the warmup is exchanged by the
    warmup's full-precision allreduce, not the momentum phase's operations."""
    for errors in run_workers(_newly_used_in_warmup, 2):
        assert len(errors) == 6 and max(errors) < 1e-6, errors
