"""powersgd: equal to torch's ``powerSGD_hook`` on one bucket at the same settings (to float rounding),
any number of buckets on gloo with every rank bit-identical, plain allreduce for ``start_iter`` steps,
checkpoints that resume bit for bit, options validated by name."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_core.runtime.exceptions import BaguaConfigError
from tests.distributed import run_workers


class Net(torch.nn.Module):
    """Matrices of several shapes (compressed) and vectors (uncompressed)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(24, 48)
        self.b = torch.nn.Linear(48, 48)
        self.c = torch.nn.Linear(48, 32)
        self.conv = torch.nn.Conv1d(2, 16, 3)  # a 3-D weight, viewed as [16, 6]
        self.head = torch.nn.Linear(32 + 16 * 10, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c(torch.relu(self.b(torch.relu(self.a(x)))))
        conv = self.conv(x[:, :24].view(-1, 2, 12)).flatten(1)
        return self.head(torch.cat([h, conv], dim=1))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 24, generator=g), torch.randint(0, 5, (16,), generator=g)


def _params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _against_torch(rank: int, rank_r: int, steps: int) -> float:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel

    os.environ["BAGUA_DEFAULT_BUCKET_SIZE"] = str(1 << 30)  # one bucket, as torch's hook needs on gloo
    reference = DistributedDataParallel(Net(), bucket_cap_mb=1024)
    state = powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=rank_r, start_powerSGD_iter=2,
                                        min_compression_rate=2, random_seed=7)
    reference.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model = model.with_bagua([optimizer], {"name": "powersgd", "matrix_approximation_rank": rank_r,
                                           "start_iter": 2, "random_seed": 7})
    assert len(model.bagua_buckets) == 1
    worst = 0.0
    for step in range(steps):
        x, y = _batch(rank, step)
        for net, opt in ((reference, ref_opt), (model, optimizer)):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
        diff = (_params(reference.module) - _params(model)).abs().max().item()
        torch.testing.assert_close(_params(model), _params(reference.module), rtol=1e-5, atol=1e-6,
                                   msg=lambda m, step=step: f"step {step}: {m}")
        worst = max(worst, diff)
    assert model.bagua_algorithm.iter == steps and state.iter == steps
    return worst


@pytest.mark.parametrize("rank_r", [1, 2, 4])  # Gram-Schmidt (1, 2) and QR (4)
def test_equals_torch_powersgd_hook_on_one_bucket(rank_r: int) -> None:
    worst = run_workers(_against_torch, 2, rank_r, 8)
    print(f"largest difference from torch's hook over 8 steps: {max(worst):.2e}")


def _many_buckets(rank: int, steps: int) -> None:
    """Several buckets; every rank applies the same gradient; error feedback loses nothing: the applied
    gradients plus the ranks' mean error equal the sum of the ranks' mean gradients."""
    os.environ["BAGUA_DEFAULT_BUCKET_SIZE"] = "4096"
    model, plain = Net(), Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model = model.with_bagua([optimizer], {"name": "powersgd", "start_iter": 1})
    assert len(model.bagua_buckets) >= 4
    n = dist.get_world_size()
    applied, exact = torch.zeros_like(_params(model)), torch.zeros_like(_params(model))
    for step in range(steps):
        x, y = _batch(rank, step)
        plain.load_state_dict(model.state_dict())
        plain.zero_grad()
        F.cross_entropy(plain(x), y).backward()
        local = torch.cat([p.grad.reshape(-1) for p in plain.parameters()])
        dist.all_reduce(local)
        exact += local / n
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        everyone = [torch.empty_like(grads) for _ in range(n)]
        dist.all_gather(everyone, grads)
        assert all(torch.equal(everyone[0], other) for other in everyone), f"step {step}: ranks differ"
        applied += grads
        optimizer.step()
    errors = {}
    for bucket, op in zip(model.bagua_buckets, model.bagua_algorithm.ops):
        for tensor, offset, numel in zip(bucket.tensors, bucket.offsets, bucket.numels):
            errors[id(tensor)] = op.error[offset : offset + numel]
    error = torch.cat([errors[id(p)] for p in model.parameters()])
    dist.all_reduce(error)
    assert error.abs().max() > 1e-3  # compression did lose something at the last step...
    torch.testing.assert_close(applied + error / n, exact, rtol=1e-4, atol=1e-5)  # ...and feedback keeps it


@pytest.mark.parametrize("world_size", [2, 3])
def test_any_number_of_buckets_on_gloo(world_size: int) -> None:
    run_workers(_many_buckets, world_size, 12)


def _warmup_is_plain_allreduce(rank: int) -> None:
    model = Net()
    plain = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], {"name": "powersgd", "start_iter": 3})
    for step in range(3):
        x, y = _batch(rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        plain.load_state_dict(model.state_dict())
        plain.zero_grad()
        F.cross_entropy(plain(x), y).backward()
        local = torch.cat([p.grad.reshape(-1) for p in plain.parameters()])
        dist.all_reduce(local)
        torch.testing.assert_close(torch.cat([p.grad.reshape(-1) for p in model.parameters()]), local / 2)
        optimizer.step()


def test_first_start_iter_steps_are_plain_allreduce() -> None:
    run_workers(_warmup_is_plain_allreduce, 2)


def _resume(rank: int, directory: str) -> None:
    from bagua_features.checkpoints.checkpoint import load_checkpoint, save_checkpoint

    os.environ["BAGUA_DEFAULT_BUCKET_SIZE"] = "4096"

    def build():
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        return model.with_bagua([optimizer], {"name": "powersgd", "start_iter": 1, "warm_start": True}), optimizer

    def train(model, optimizer, steps):
        for step in steps:
            x, y = _batch(rank, step)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()

    model, optimizer = build()
    train(model, optimizer, range(4))
    save_checkpoint(4, directory, model, optimizer)
    train(model, optimizer, range(4, 8))
    expected = _params(model)
    model.bagua_shutdown()
    resumed, resumed_opt = build()
    assert load_checkpoint(directory, resumed, resumed_opt) == 4
    train(resumed, resumed_opt, range(4, 8))
    assert torch.equal(_params(resumed), expected)


def test_checkpoint_resumes_bit_for_bit(tmp_path) -> None:
    run_workers(_resume, 2, str(tmp_path))


def test_options_are_validated_by_name() -> None:
    from bagua_algorithms.powersgd import PowerSGDAlgorithm

    with pytest.raises(BaguaConfigError, match="matrix_approximation_rank"):
        PowerSGDAlgorithm(matrix_approximation_rank=0)
    with pytest.raises(BaguaConfigError, match="start_iter"):
        PowerSGDAlgorithm(start_iter=-1)
    with pytest.raises(BaguaConfigError, match="rank_r"):
        from bagua_core.selection.config import resolve_algorithm

        resolve_algorithm({"name": "powersgd", "rank_r": 2})
