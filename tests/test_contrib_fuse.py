"""fuse_optimizer / fuse_step give the unfused optimizer's results (several optimizers, state dicts,
moved gradients, a bagua-wrapped module on 2 ranks)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from bagua_contrib.fused_optimizer import fuse_optimizer, fuse_state_of, fuse_step, is_fused_optimizer
from tests.distributed import run_workers
from tests.models import SmallNet, batch

OPTIMIZERS = [
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}),
    (torch.optim.Adam, {"lr": 0.01, "amsgrad": True}),
    (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
    (torch.optim.RMSprop, {"lr": 0.01, "momentum": 0.5, "centered": True}),
    (torch.optim.Adagrad, {"lr": 0.1, "lr_decay": 0.01}),
]


class Net(SmallNet):
    def __init__(self) -> None:
        super().__init__(seed=0)
        self.unused = torch.nn.Linear(2, 2)  # never gets a gradient: must stay untouched
        self.scale = torch.nn.Parameter(torch.ones(4, dtype=torch.float64))  # a second dtype

    def forward(self, x):
        return super().forward(x) * self.scale.float()


def _make(cls, kwargs):
    model = Net()
    groups = [{"params": [p for n, p in model.named_parameters() if not n.startswith("fc1")]},
              {"params": list(model.fc1.parameters()), "lr": kwargs["lr"] / 2}]
    return model, cls(groups, **kwargs)


def _train(model, optimizer, step_fn, steps, start=0):
    for step in range(start, start + steps):
        x, y = batch(0, step)

        def closure(x=x, y=y):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        step_fn(closure) if step % 2 else (closure(), step_fn(None))


@pytest.mark.parametrize("cls,kwargs", OPTIMIZERS, ids=[c.__name__ for c, _ in OPTIMIZERS])
def test_fused_equals_unfused(cls, kwargs) -> None:
    ref_model, ref_opt = _make(cls, kwargs)
    model, optimizer = _make(cls, kwargs)
    assert fuse_optimizer(optimizer) is optimizer and is_fused_optimizer(optimizer)
    with pytest.raises(RuntimeError, match="already fused"):
        fuse_optimizer(optimizer)
    flat = model.fc2.weight.untyped_storage().data_ptr()
    assert model.head.bias.untyped_storage().data_ptr() == flat  # params are views of one buffer

    _train(ref_model, ref_opt, ref_opt.step, 4)
    _train(model, optimizer, optimizer.fuse_step, 4)
    runs = [len(key[0]) for key in fuse_state_of(optimizer).flats]
    assert sorted(runs) == [2, 4], runs  # fc1 (group 1); fc2 and head (group 0; unused has no grad)
    for (name, a), b in zip(ref_model.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7, msg=name)
    assert torch.equal(model.unused.weight, Net().unused.weight)

    # the per-parameter state is visible (state_dict) and equal; it survives a save/load round trip
    ref_state, state = ref_opt.state_dict(), optimizer.state_dict()
    assert ref_state["state"].keys() == state["state"].keys()
    for index, values in ref_state["state"].items():
        for key, value in values.items():
            torch.testing.assert_close(torch.as_tensor(state["state"][index][key]), torch.as_tensor(value),
                                       rtol=1e-6, atol=1e-7)
    optimizer.load_state_dict(state)  # per-parameter copies now: the next fused step re-merges them
    model.fc2.weight.data = model.fc2.weight.data.clone()  # moved out of the buffer: check_flatten fixes it
    _train(ref_model, ref_opt, ref_opt.step, 2, start=4)
    _train(model, optimizer, lambda c: fuse_step(optimizer, c), 2, start=4)
    for a, b in zip(ref_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    assert model.fc2.weight.untyped_storage().data_ptr() == flat
    _train(model, optimizer, optimizer.step, 1, start=6)  # the plain step still works on the views
    _train(ref_model, ref_opt, ref_opt.step, 1, start=6)
    for a, b in zip(ref_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


def test_without_flatten_and_non_elementwise_fallback() -> None:
    ref_model, ref_opt = _make(torch.optim.Adam, {"lr": 0.01})
    model, optimizer = _make(torch.optim.Adam, {"lr": 0.01})
    fuse_optimizer(optimizer, do_flatten=False)  # nothing contiguous to fuse: still correct
    _train(ref_model, ref_opt, ref_opt.step, 3)
    _train(model, optimizer, optimizer.fuse_step, 3)
    for a, b in zip(ref_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    lbfgs = fuse_optimizer(torch.optim.LBFGS(torch.nn.Linear(2, 1).parameters()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fuse_step(lbfgs, lambda: torch.tensor(0.0))
    assert "not known to be element-wise" in str(caught[0].message)
    with pytest.raises(RuntimeError, match="fuse_optimizer"):
        fuse_step(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1))


def _wrapped(rank: int) -> list[torch.Tensor]:
    results = []
    for fused in (False, True):
        model = SmallNet(seed=rank)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        if fused:
            fuse_optimizer(optimizer)
        model = model.with_bagua([optimizer], "gradient_allreduce", do_flatten=not fused)
        for step in range(3):
            x, y = batch(rank, step)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.fuse_step() if fused else optimizer.step()
        model.bagua_shutdown()
        results.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    torch.testing.assert_close(results[1], results[0], rtol=1e-6, atol=1e-7)
    return results[1]


def test_fused_with_bagua_module_two_ranks() -> None:
    results = run_workers(_wrapped, 2)
    assert torch.equal(results[0], results[1])
