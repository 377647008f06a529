"""decentralized_dp at parity with decent-dp 0.2.3's later API: ``global_avg(will_revert=True,
return_d2c=False)``, ``revert_global_avg()``, ``get_lr()`` and the adaptive factor."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_algorithms.decentralized_dp import DecentralizedDataParallel
from tests.distributed import run_workers
from tests.models import SmallNet, batch


def _sgd(named):
    return torch.optim.SGD([p for _, p in named], lr=0.1)


def _wrap(**kwargs) -> DecentralizedDataParallel:
    return DecentralizedDataParallel(SmallNet(), _sgd, topology="ring", **kwargs)


def _step(model, rank: int, step: int) -> None:
    x, y = batch(rank, step)
    F.cross_entropy(model(x), y).backward()


def _params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _parity(rank: int) -> dict:
    out = {}
    model, twin = _wrap(), _wrap()
    for step in range(3):
        _step(model, rank, step)
        _step(twin, rank, step)
    local = _params(model)
    d2c = model.global_avg(will_revert=True, return_d2c=True)
    averaged = _params(model)
    mean = [p.clone() for p in local]
    for p in mean:
        dist.all_reduce(p)
        p.div_(dist.get_world_size())
    out["exact_mean"] = all(torch.allclose(a, m, atol=1e-6) for a, m in zip(averaged, mean))
    out["d2c"] = (d2c, torch.norm(torch.stack([torch.norm(a - b) for a, b in zip(local, averaged)])).item())
    model.revert_global_avg()
    out["reverted"] = all(torch.equal(a, b) for a, b in zip(_params(model), local))
    _step(model, rank, 3)  # the round in flight was kept: training goes on as if nothing happened
    _step(twin, rank, 3)
    out["continues"] = all(torch.equal(a, b) for a, b in zip(_params(model), _params(twin)))
    model.global_avg(will_revert=False)
    out["no_revert_d2c"] = model.global_avg(will_revert=False, return_d2c=True)
    # get_lr: the first bucket scheduler's learning rate, 0.0 before the first backward
    scheduled = DecentralizedDataParallel(
        SmallNet(), _sgd, lr_scheduler_fn=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5),
        topology="ring")
    lrs = [scheduled.get_lr()]
    for step in range(2):
        _step(scheduled, rank, step)
        lrs.append(scheduled.get_lr())
    out["lrs"] = lrs
    # adaptive factor 0: no mixing at all, the trajectory of local SGD
    frozen = _wrap()
    frozen.set_adaptive_factor(0.0)
    alone = SmallNet()
    optimizer = torch.optim.SGD(alone.parameters(), lr=0.1)
    for step in range(3):
        _step(frozen, rank, step)
        optimizer.zero_grad()
        _step(alone, rank, step)
        optimizer.step()
    out["factor0_local"] = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(_params(frozen), _params(alone)))
    return out


def test_global_avg_revert_get_lr_and_adaptive_factor() -> None:
    for r in run_workers(_parity, 2):
        assert r["exact_mean"]
        d2c, expected = r["d2c"]
        assert d2c > 0 and abs(d2c - expected) < 1e-5
        assert r["reverted"] and r["continues"]
        assert r["no_revert_d2c"] == 0.0  # already averaged
        assert r["lrs"] == [0.0, 0.05, 0.025]
        assert r["factor0_local"]
