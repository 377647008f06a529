"""AccumAdam/AccumAdamW against a plain implementation; accum_iter=1 is exactly Adam/AdamW; weight-decay
grouping spares norm and bias parameters (not the other way round)."""

from __future__ import annotations

import pytest
import torch

from bagua_algorithms.decentralized_dp import AccumAdam, AccumAdamW, optim_fn_for, optim_fn_like, weight_decay_groups


def _plain(params0, grads, lr, betas, eps, wd, accum, decoupled):
    """The update written out with plain loops, one list of gradients per step."""
    p = [x.clone() for x in params0]
    m = [torch.zeros_like(x) for x in p]
    v = [torch.zeros_like(x) for x in p]
    a = [torch.zeros_like(x) for x in p]
    count, k = 0, 0
    for t, step_grads in enumerate(grads, start=1):
        count += 1
        refresh = (t - 1) % accum == 0
        if refresh:
            k += 1
        for i, g in enumerate(step_grads):
            if decoupled:
                p[i] = p[i] * (1 - lr * wd)
            else:
                g = g + wd * p[i]
            a[i] = a[i] + g
            if refresh:
                mean = a[i] / count
                m[i] = betas[0] * m[i] + (1 - betas[0]) * mean
                v[i] = betas[1] * v[i] + (1 - betas[1]) * mean * mean
                a[i] = torch.zeros_like(a[i])
            m_hat, v_hat = m[i] / (1 - betas[0] ** k), v[i] / (1 - betas[1] ** k)
            p[i] = p[i] - lr * m_hat / (v_hat.sqrt() + eps)
        if refresh:
            count = 0
    return p


def _run(optimizer_cls, grads, params0, **options):
    params = [torch.nn.Parameter(x.clone()) for x in params0]
    optimizer = optimizer_cls(params, **options)
    for step_grads in grads:
        for param, g in zip(params, step_grads):
            param.grad = g.clone()
        optimizer.step()
    return [p.detach() for p in params]


def _data(steps=7):
    gen = torch.Generator().manual_seed(0)
    params0 = [torch.randn(3, 2, generator=gen), torch.randn(4, generator=gen)]
    grads = [[torch.randn(x.shape, generator=gen) for x in params0] for _ in range(steps)]
    return params0, grads


@pytest.mark.parametrize("cls,decoupled,wd", [(AccumAdam, False, 0.1), (AccumAdamW, True, 0.05)])
@pytest.mark.parametrize("accum", [2, 3])
def test_accumulated_moments_equal_the_plain_implementation(cls, decoupled, wd, accum) -> None:
    params0, grads = _data()
    ours = _run(cls, grads, params0, lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=wd, accum_iter=accum)
    expected = _plain(params0, grads, 0.01, (0.8, 0.9), 1e-6, wd, accum, decoupled)
    for a, b in zip(ours, expected):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("cls,reference", [(AccumAdam, torch.optim.Adam), (AccumAdamW, torch.optim.AdamW)])
def test_accum_iter_one_is_adam(cls, reference) -> None:
    params0, grads = _data()
    ours = _run(cls, grads, params0, lr=0.01, weight_decay=0.1, accum_iter=1)
    theirs = _run(reference, grads, params0, lr=0.01, weight_decay=0.1)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_bad_accum_iter() -> None:
    with pytest.raises(ValueError, match="accum_iter must be a positive integer, got 0"):
        AccumAdam([torch.nn.Parameter(torch.zeros(1))], accum_iter=0)


def test_norm_and_bias_get_no_weight_decay() -> None:
    layer, norm = torch.nn.Linear(3, 3), torch.nn.LayerNorm(3)
    named = [("fc.weight", layer.weight), ("fc.bias", layer.bias), ("ln.weight", norm.weight), ("ln.bias", norm.bias)]
    decayed, spared = weight_decay_groups(named, 0.05)
    assert decayed["weight_decay"] == 0.05 and [id(p) for p in decayed["params"]] == [id(layer.weight)]
    assert spared["weight_decay"] == 0.0 and len(spared["params"]) == 3
    optimizer = optim_fn_for(torch.optim.AdamW, lr=1e-3, weight_decay=0.05)(named)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.05, 0.0]
    assert len(weight_decay_groups(named, 0.05, no_decay_on_norm_and_bias=False)) == 1


def test_optimizer_like_the_users_keeps_each_groups_options_and_follows_its_lr() -> None:
    layer = torch.nn.Linear(3, 3)
    user = torch.optim.SGD([{"params": [layer.weight]}, {"params": [layer.bias], "weight_decay": 0.0}],
                           lr=0.1, momentum=0.9, weight_decay=0.01)
    bucket = optim_fn_like(user)([("bias", layer.bias), ("weight", layer.weight)])
    assert type(bucket) is torch.optim.SGD
    assert [(len(g["params"]), g["weight_decay"], g["momentum"]) for g in bucket.param_groups] == [(1, 0.0, 0.9),
                                                                                                   (1, 0.01, 0.9)]
    user.param_groups[1]["lr"] = 0.5
    layer.weight.grad, layer.bias.grad = torch.zeros(3, 3), torch.zeros(3)
    bucket.step()
    assert bucket.param_groups[0]["lr"] == 0.5 and bucket.param_groups[1]["lr"] == 0.1
