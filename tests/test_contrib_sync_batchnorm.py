"""SyncBatchNorm on 2 gloo ranks equals BatchNorm over the concatenated batch: outputs, gradients,
running statistics; convert_sync_batchnorm; inside a bagua-wrapped module."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import bagua_core as bagua
from bagua_contrib.sync_batchnorm import SyncBatchNorm
from tests.distributed import run_workers

SIZES = (3, 5)  # different batch sizes per rank


def _data(rank: int, shape_tail: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(rank + 10)
    x = torch.randn(SIZES[rank], 4, *shape_tail, generator=gen, dtype=torch.float64) * 3 + rank
    return x, torch.randn(x.shape, generator=gen, dtype=torch.float64)


def _reference(shape_tail, bn_cls):
    xs, gs = zip(*[_data(r, shape_tail) for r in range(2)], strict=True)
    x = torch.cat(xs).requires_grad_()
    bn = bn_cls(4).double()
    with torch.no_grad():
        bn.weight.copy_(torch.linspace(0.5, 2, 4))
        bn.bias.copy_(torch.linspace(-1, 1, 4))
    for _ in range(2):
        out = bn(x)
    (out * torch.cat(gs)).sum().backward()
    return out.detach(), x.grad, bn


def _check_against_full_batch(rank: int) -> None:
    for shape_tail, bn_cls in (((), torch.nn.BatchNorm1d), ((5,), torch.nn.BatchNorm1d), ((3, 2), torch.nn.BatchNorm2d)):
        ref_out, ref_grad, ref_bn = _reference(shape_tail, bn_cls)
        model = torch.nn.Sequential(bn_cls(4)).double()
        with torch.no_grad():
            model[0].weight.copy_(torch.linspace(0.5, 2, 4))
            model[0].bias.copy_(torch.linspace(-1, 1, 4))
        model = SyncBatchNorm.convert_sync_batchnorm(model)
        bn = model[0]
        assert isinstance(bn, SyncBatchNorm) and bn.weight.dtype == torch.float64
        x, g = _data(rank, shape_tail)
        x.requires_grad_()
        for _ in range(2):
            out = model(x)
        (out * g).sum().backward()
        start = sum(SIZES[:rank])
        torch.testing.assert_close(out, ref_out[start:start + SIZES[rank]])
        torch.testing.assert_close(x.grad, ref_grad[start:start + SIZES[rank]])
        for p, ref_p in zip(bn.parameters(), ref_bn.parameters(), strict=True):  # local grads sum to the full one
            bagua.allreduce_inplace(p.grad)
            torch.testing.assert_close(p.grad, ref_p.grad)
        torch.testing.assert_close(bn.running_mean, ref_bn.running_mean)
        torch.testing.assert_close(bn.running_var, ref_bn.running_var)
        assert int(bn.num_batches_tracked) == 2
        bn.eval()
        torch.testing.assert_close(bn(x.detach()), ref_bn.eval()(x.detach()))


def _wrapped_training(rank: int) -> torch.Tensor:
    """Equal batch sizes: averaged gradients of a SyncBN net == the full-batch gradient."""
    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(), torch.nn.Linear(4, 2))

    xs = [torch.randn(6, 3, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    ys = [torch.randint(0, 2, (6,), generator=torch.Generator().manual_seed(r)) for r in range(2)]
    ref = net()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    model = SyncBatchNorm.convert_sync_batchnorm(net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], "gradient_allreduce")
    for _ in range(3):
        ref_opt.zero_grad()
        F.cross_entropy(ref(torch.cat(xs)), torch.cat(ys)).backward()
        ref_opt.step()
        optimizer.zero_grad()
        F.cross_entropy(model(xs[rank]), ys[rank]).backward()
        optimizer.step()
    for p, ref_p in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, ref_p, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model[1].running_var, ref[1].running_var)
    model.bagua_shutdown()
    return model[0].weight.detach()


def _all_checks(rank: int) -> torch.Tensor:
    _check_against_full_batch(rank)
    return _wrapped_training(rank)


def test_sync_batchnorm_two_ranks() -> None:
    results = run_workers(_all_checks, 2)
    assert torch.equal(results[0], results[1])


def test_single_process_is_plain_batchnorm() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 3, 4)
    bn, sync = torch.nn.BatchNorm1d(3), SyncBatchNorm(3)
    torch.testing.assert_close(sync(x), bn(x))
    torch.testing.assert_close(sync.running_var, bn.running_var)
    import pytest

    with pytest.raises(ValueError, match="expects an input of shape"):
        sync(torch.randn(3))
