"""Contrib on CUDA: SyncBatchNorm and MoE on two ranks sharing the GPU (gloo) against their CPU results,
the fused optimizer on CUDA parameters against the unfused one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bagua_contrib.fused_optimizer import fuse_optimizer
from bagua_contrib.moe import MoE
from bagua_contrib.sync_batchnorm import SyncBatchNorm
from tests.distributed import run_workers
from tests.models import SmallNet, batch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
GLOO = {"BAGUA_BACKEND": "gloo"}


def _device(kind: str) -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if kind == "cuda" else torch.device("cpu")


def _sync_batchnorm(rank: int, kind: str) -> list[torch.Tensor]:
    device = _device(kind)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model = SyncBatchNorm.convert_sync_batchnorm(model).double().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], "gradient_allreduce")
    gen = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(5 + rank, 3, generator=gen, dtype=torch.float64).to(device)
        y = torch.randint(0, 2, (5 + rank,), generator=gen).to(device)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.bagua_shutdown()
    return [t.detach().cpu() for t in (*model.parameters(), model[1].running_mean, model[1].running_var)]


def test_sync_batchnorm_on_cuda() -> None:
    on_cpu = run_workers(_sync_batchnorm, 2, "cpu")
    on_cuda = run_workers(_sync_batchnorm, 2, "cuda", env=GLOO)
    for cpu, cuda in zip(on_cpu, on_cuda):
        for a, b in zip(cpu, cuda):
            torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)


def _moe(rank: int, kind: str) -> list[torch.Tensor]:
    device = _device(kind)
    torch.manual_seed(7)
    expert = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 6))
    moe = MoE(6, expert, num_local_experts=2, k=2, capacity_factor=1.0, min_capacity=1).to(device)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(3, 4, 6, generator=gen).to(device).requires_grad_()
    out, l_aux, counts = moe(x)
    (out.square().sum() + l_aux).backward()
    return [out.detach().cpu(), x.grad.cpu(), counts.cpu(), *(p.grad.cpu() for p in moe.parameters())]


def test_moe_on_cuda() -> None:
    on_cpu = run_workers(_moe, 2, "cpu")
    on_cuda = run_workers(_moe, 2, "cuda", env=GLOO)
    for cpu, cuda in zip(on_cpu, on_cuda):
        assert torch.equal(cpu[2], cuda[2])  # the same tokens kept per expert
        for a, b in zip(cpu, cuda):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls,kwargs", [(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}), (torch.optim.Adam, {"lr": 0.01})])
def test_fused_optimizer_on_cuda(cls, kwargs) -> None:
    results = []
    for fused in (False, True):
        model = SmallNet(seed=0).cuda()
        optimizer = cls(model.parameters(), **kwargs)
        if fused:
            fuse_optimizer(optimizer)
            assert all(p.is_cuda for group in optimizer.param_groups for p in group["params"])
        for step in range(4):
            x, y = batch(0, step)
            optimizer.zero_grad()
            F.cross_entropy(model(x.cuda()), y.cuda()).backward()
            optimizer.fuse_step() if fused else optimizer.step()
        results.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    torch.testing.assert_close(results[1], results[0], rtol=1e-6, atol=1e-7)
