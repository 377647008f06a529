"""DecentralizedDataParallel features on 2 ranks, in one spawn: channels_last and bucket views, gradient
accumulation, AMP scaler, clipping, per-bucket LR schedulers, AccumAdam's hook, and the clear errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from bagua_algorithms.decentralized_dp import AccumAdam, DecentralizedDataParallel, get_topology
from bagua_core.runtime.exceptions import BaguaConfigError, BaguaError, RankMismatchError, UnknownNameError
from tests.distributed import run_workers
from tests.models import SmallNet, batch


def _sgd(lr: float = 0.1):
    return lambda named: torch.optim.SGD([p for _, p in named], lr=lr)


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
        self.head = torch.nn.Linear(4 * 4 * 4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).flatten(1))


class Ordered(torch.nn.Module):
    """Two square layers applied in an order that may differ between ranks."""

    def __init__(self, swap: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.swap = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), swap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(self.b(x)) if self.swap else self.b(self.a(x))


def _train(model, rank: int, steps: int, scaler=None, images: bool = False) -> list[torch.Tensor]:
    for step in range(steps):
        gen = torch.Generator().manual_seed(10 * step + rank)
        x = torch.randn(2, 3, 6, 6, generator=gen).to(memory_format=torch.channels_last) if images else None
        if x is None:
            x, y = batch(rank, step)
        else:
            y = torch.randint(0, 2, (2,), generator=gen)
        loss = F.cross_entropy(model(x), y)
        (scaler.scale(loss) if scaler is not None else loss).backward()
    return [p.detach().clone() for p in model.parameters()]


def _expect(error: type[BaseException], fn) -> str:
    with pytest.raises(error) as info:
        fn()
    return str(info.value)


def _features(rank: int) -> dict:
    out: dict = {}
    # channels_last parameters as bucket views (layout kept) equal the copy-based path
    view = DecentralizedDataParallel(ConvNet(), _sgd(), topology="ring")
    copy = DecentralizedDataParallel(ConvNet(), _sgd(), topology="ring", param_as_bucket_view=False)
    out["views"] = (_train(view, rank, 3, images=True), _train(copy, rank, 3, images=True))
    flat = view.engine.buckets[0].flat
    weight = view.module.conv.weight
    out["channels_last"] = weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    out["in_buffer"] = all(
        flat.data_ptr() <= p.data_ptr() < flat.data_ptr() + flat.numel() * 4 for p in view.parameters()
    )
    # gradient accumulation: two micro-batches then one step == one step on the summed loss
    accum = DecentralizedDataParallel(SmallNet(), _sgd())
    whole = DecentralizedDataParallel(SmallNet(), _sgd())
    for step in range(2):
        (x1, y1), (x2, y2) = batch(rank, 2 * step), batch(rank, 2 * step + 1)
        accum.set_accumulate_grad(True)
        F.cross_entropy(accum(x1), y1).backward()
        accum.set_accumulate_grad(False)
        F.cross_entropy(accum(x2), y2).backward()
        (F.cross_entropy(whole(x1), y1) + F.cross_entropy(whole(x2), y2)).backward()
    out["accumulate"] = ([p.detach().clone() for p in accum.parameters()],
                         [p.detach().clone() for p in whole.parameters()], accum.engine.step)
    # eval mode: backward neither steps nor communicates
    accum.eval()
    frozen = [p.detach().clone() for p in accum.parameters()]
    F.cross_entropy(accum(x1), y1).backward()
    out["eval"] = accum.engine.step == 2 and all(torch.equal(a, b) for a, b in zip(frozen, accum.parameters()))
    out["eval"] = out["eval"] and all(p.grad is not None for p in accum.parameters())
    accum.train()
    # AMP scaler (power-of-two scale: unscaling is exact) equals the plain path; an inf halves the scale
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    scaled = DecentralizedDataParallel(SmallNet(), _sgd(), topology="ring", scaler=scaler, grad_clip_norm=100.0)
    plain = DecentralizedDataParallel(SmallNet(), _sgd(), topology="ring")
    out["scaler"] = (_train(scaled, rank, 3, scaler), _train(plain, rank, 3))
    x, y = batch(rank, 9)
    scaler.scale(F.cross_entropy(scaled(x), y) * float("inf")).backward()
    out["scale_after_inf"] = scaler.get_scale()
    out["finite"] = all(torch.isfinite(p).all() for p in scaled.parameters())
    # clipping per bucket: the first (local) step moves the parameters by lr * clipped gradient
    clipped = DecentralizedDataParallel(SmallNet(), _sgd(1.0), grad_clip_norm=1e-3)
    start = [p.detach().clone() for p in clipped.parameters()]
    moved = _train(clipped, rank, 1)
    out["clip_norm"] = torch.cat([(a - b).reshape(-1) for a, b in zip(moved, start)]).norm().item()
    # one LR scheduler per bucket, stepped with its optimizer
    scheduled = DecentralizedDataParallel(
        SmallNet(), _sgd(), lr_scheduler_fn=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5),
        bucket_size_in_mb=300 / 2**20,
    )
    _train(scheduled, rank, 3)
    out["lrs"] = [opt.param_groups[0]["lr"] for opt in scheduled.optimizers]
    # AccumAdam trains inside the wrapper; its hook mixes the accumulated gradients before a refresh
    adam = DecentralizedDataParallel(SmallNet(), lambda named: AccumAdam([p for _, p in named], accum_iter=2))
    _train(adam, rank, 4)
    out["accum_adam_last_edge"] = adam.optimizers[0].last_edge.ranks
    topology = get_topology("complete", 2)
    topology.build_groups()
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = AccumAdam([param], accum_iter=2)
    for step in range(2):
        param.grad = torch.full((3,), float(rank + step))
        optimizer.step()
        optimizer.pre_average_hook(topology.edge(rank, step), 0.5)
    out["mixed_accumulation"] = optimizer.state[param]["grad_accum"].clone()
    # errors, raised identically on every rank
    swapped = DecentralizedDataParallel(Ordered(swap=rank == 1), _sgd())
    out["order"] = _expect(RankMismatchError, lambda: swapped(torch.randn(2, 4)).sum().backward())
    twice = DecentralizedDataParallel(torch.nn.Linear(4, 4), _sgd())
    lin = twice.module
    out["twice"] = _expect(BaguaError, lambda: lin(checkpoint(lin, torch.randn(2, 4, requires_grad=True),
                                                            use_reentrant=True)).sum().backward())
    out["unknown"] = _expect(UnknownNameError, lambda: DecentralizedDataParallel(SmallNet(), _sgd(), topology="star"))
    out["size"] = _expect(BaguaConfigError, lambda: DecentralizedDataParallel(
        SmallNet(), _sgd(), topology="alternating-exp-ring", local_world_size=2))
    out["option"] = _expect(BaguaConfigError, lambda: DecentralizedDataParallel(SmallNet(), _sgd(), grad_clip_norm=-1))
    return out


def test_features_and_errors_on_two_ranks() -> None:
    results = run_workers(_features, 2)
    for out in results:
        for a, b in zip(*out["views"]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert out["channels_last"] and out["in_buffer"]
        accum, whole, steps = out["accumulate"]
        assert steps == 2 and out["eval"]
        for a, b in zip(accum, whole):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(*out["scaler"]):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
        assert out["scale_after_inf"] == 2.0**7 and out["finite"]
        assert out["clip_norm"] == pytest.approx(1e-3, rel=1e-3)
        assert len(out["lrs"]) > 1 and all(lr == pytest.approx(0.1 * 0.5**3) for lr in out["lrs"])
        assert out["accum_adam_last_edge"] == (0, 1)
        # step 1 refreshes (accumulation emptied), step 2 accumulates rank + 1, the hook averages it
        torch.testing.assert_close(out["mixed_accumulation"], torch.full((3,), 1.5))
        assert "differs between rank" in out["order"] and "position 0" in out["order"]
        assert "twice in one backward" in out["twice"]
        assert "'star'" in out["unknown"] and "ring" in out["unknown"]
        assert "power-of-two number of nodes" in out["size"]
        assert "grad_clip_norm must be a non-negative number, got -1" in out["option"]
    assert any(not torch.equal(a, b) for a, b in zip(results[0]["views"][0], results[1]["views"][0]))
