"""The ``decentralized_dp`` algorithm for ``with_bagua`` equals the DecentralizedDataParallel wrapper with the
same optimizer, under the user's plain ``zero_grad / backward / step`` loop (step never updates twice)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bagua_algorithms.decentralized_dp import DecentralizedDataParallel, optim_fn_like
from bagua_algorithms.decentralized_dp.algorithm import DecentralizedDPAlgorithm
from bagua_core.runtime.exceptions import BaguaConfigError, BaguaError
from tests.distributed import run_workers
from tests.models import SmallNet, batch

STEPS = 4


def _user_optimizer(model: torch.nn.Module) -> torch.optim.SGD:
    decayed = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    spared = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return torch.optim.SGD([{"params": decayed}, {"params": spared, "weight_decay": 0.0}],
                           lr=0.1, momentum=0.9, weight_decay=0.01)


def _compare(rank: int) -> dict:
    out: dict = {}
    reference_net = SmallNet(seed=rank)
    reference = DecentralizedDataParallel(reference_net, optim_fn_like(_user_optimizer(reference_net)),
                                          topology="ring", bucket_size_in_mb=300 / 2**20)
    model = SmallNet(seed=rank)
    optimizer = _user_optimizer(model)
    post_steps = []
    optimizer.register_step_post_hook(lambda opt, args, kwargs: post_steps.append(1))
    model = model.with_bagua([optimizer], {"name": "decentralized_dp", "topology": "ring",
                                           "bucket_size_in_mb": 300 / 2**20})
    for step in range(STEPS):
        x, y = batch(rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        F.cross_entropy(reference(x), y).backward()
    out["plugin"] = [p.detach().clone() for p in model.parameters()]
    out["wrapper"] = [p.detach().clone() for p in reference.parameters()]
    out["post_steps"] = len(post_steps)
    engine = model.bagua_algorithm.engine
    out["bias_decay"] = sorted({g["weight_decay"] for b in engine.buckets for g in b.optimizer.param_groups
                                for p in g["params"] if p.dim() == 1})
    model.bagua_algorithm.global_avg(model)
    out["averaged"] = [p.detach().clone() for p in model.parameters()]
    # the user's LR scheduler drives the bucket optimizers; no_sync accumulates without stepping
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    scheduler.step()
    with model.no_sync():
        F.cross_entropy(model(x), y).backward()
    steps_before = engine.step
    F.cross_entropy(model(x), y).backward()
    out["steps"] = (steps_before, engine.step)
    out["bucket_lrs"] = sorted({g["lr"] for b in engine.buckets for g in b.optimizer.param_groups})
    with pytest.raises(BaguaError, match="step\\(closure\\) is not supported"):
        optimizer.step(lambda: 0.0)
    model.bagua_shutdown()
    out["restored"] = "step" not in optimizer.__dict__
    # options are validated before any communication, on every rank
    other = SmallNet()
    other_optimizer = torch.optim.SGD(other.parameters(), lr=0.1)
    for bad, message in [({"topology": "nope"}, "unknown topology 'nope'"), ({"bucket_size_in_mb": 0}, "bucket_size_in_mb"),
                         ({"topology": "one-peer-exp", "grad_clip_norm": -1.0}, "grad_clip_norm")]:
        with pytest.raises(BaguaError, match=message):
            other.with_bagua([other_optimizer], {"name": "decentralized_dp", **bad})
    with pytest.raises(BaguaConfigError, match="optimizer must hold exactly the module's trainable parameters"):
        SmallNet().with_bagua([other_optimizer], DecentralizedDPAlgorithm(topology="complete"))
    return out


def test_plugin_equals_wrapper_with_a_plain_training_loop() -> None:
    results = run_workers(_compare, 4, local_size=2)
    for out in results:
        for ours, theirs in zip(out["plugin"], out["wrapper"]):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        assert out["post_steps"] == STEPS  # the user's step hooks still run
        assert out["bias_decay"] == [0.0]
        assert out["steps"] == (STEPS, STEPS + 1)
        assert out["bucket_lrs"] == [0.05]
        assert out["restored"]
    assert any(not torch.equal(a, b) for a, b in zip(results[0]["plugin"], results[1]["plugin"]))
    for out in results[1:]:
        for a, b in zip(out["averaged"], results[0]["averaged"]):
            assert torch.equal(a, b)
