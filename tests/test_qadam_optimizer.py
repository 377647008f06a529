"""``QAdamOptimizer`` steps with a few ``_foreach`` kernels per parameter group: on the CPU its values are
the per-tensor operations' bit for bit (warmup: ``torch.optim.Adam(foreach=False)``; after warmup the
reference update), on both the native and the Python backend; and it dispatches about as many aten
operators per step as ``torch.optim.Adam(foreach=True)``, not several per tensor."""

from __future__ import annotations

import pytest
import torch

from bagua_algorithms.q_adam import QAdamOptimizer
from bagua_algorithms.q_adam.kernels import adam_update, reference_adam_update
from bagua_algorithms.q_adam.optimizer import _frozen_step
from benchmarks.optimizer_step import count_aten_ops, resnet50_shapes

LR, BETAS, EPS, WD = 1e-2, (0.9, 0.99), 1e-8, 0.01


def _params(seed: int, shapes=((5, 3), (7,), (2, 2, 3), (1,))) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=generator)) for s in shapes]


def _grads(params: list[torch.Tensor], step: int) -> None:
    generator = torch.Generator().manual_seed(100 + step)
    for i, p in enumerate(params):
        p.grad = None if (i == 1 and step == 5) else torch.randn(p.shape, generator=generator)  # one skips a step


def _per_tensor_step(params, state, step: int, warmup: bool) -> None:
    """The step as written tensor by tensor (what QAdamOptimizer computed before its _foreach kernels)."""
    beta1, beta2 = BETAS
    bc1, bc2 = 1 - beta1**step, 1 - beta2**step
    with torch.no_grad():
        for p in params:
            if p.grad is None:
                continue
            m, v = state[p]
            grad = p.grad.add(p, alpha=WD)
            m.lerp_(grad, 1 - beta1)
            if warmup:
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                p.addcdiv_(m, (v.sqrt() / bc2**0.5).add_(EPS), value=-(LR / bc1))
            else:
                reference_adam_update(p, m, v, -(LR / bc1), bc2**0.5, EPS)


@pytest.mark.parametrize("policy", ["native", "python"])
def test_steps_equal_the_per_tensor_operations(monkeypatch, policy: str) -> None:
    from bagua_core.runtime.native import policy as native_policy

    if policy == "python":
        monkeypatch.setattr(native_policy, "cpu_backend", lambda: (None, "forced by the test"))
    ours, theirs = _params(0), _params(0)
    adam = _params(0)
    optimizer = QAdamOptimizer([{"params": ours[:2]}, {"params": ours[2:], "lr": LR}], lr=LR, warmup_steps=3,
                               betas=BETAS, eps=EPS, weight_decay=WD)
    torch_adam = torch.optim.Adam(adam, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, foreach=False)
    state = {p: (torch.zeros_like(p), torch.zeros_like(p)) for p in theirs}
    for step in range(1, 7):
        for params in (ours, theirs, adam):
            _grads(params, step)
        optimizer.step()
        _per_tensor_step(theirs, state, step, warmup=step <= 3)
        if step <= 3:  # warmup: torch's Adam, bit for bit
            torch_adam.step()
            assert all(torch.equal(a, b) for a, b in zip(ours, adam)), step
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs)), (policy, step)
        assert all(torch.equal(optimizer.state[a]["exp_avg"], state[b][0]) for a, b in zip(ours, theirs))


def _resnet_optimizers() -> dict[str, torch.optim.Optimizer]:
    generator = torch.Generator().manual_seed(0)
    made = {}
    for name in ("adam", "warmup", "frozen"):
        params = [torch.nn.Parameter(torch.zeros(s)) for s in resnet50_shapes()[:40]]
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator)
        made[name] = torch.optim.Adam(params, foreach=True) if name == "adam" else \
            QAdamOptimizer(params, warmup_steps=10**6 if name == "warmup" else 1)
    for optimizer in made.values():
        optimizer.step()
        optimizer.step()
    return made


def test_aten_operators_per_step_about_adams() -> None:
    """Issue 39's bound: at most 1.5x the aten operators of Adam(foreach=True) per step, in warmup and after
    (before the _foreach kernels, warmup dispatched 3.4x)."""
    optimizers = _resnet_optimizers()
    counts = {name: count_aten_ops(optimizer.step) for name, optimizer in optimizers.items()}
    assert counts["warmup"] <= 1.5 * counts["adam"], counts
    assert counts["frozen"] <= 1.5 * counts["adam"], counts
    assert counts["warmup"] < len(resnet50_shapes()[:40]), counts  # not one operator (or more) per tensor


def _on(device: str, params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(p.detach().to(device)) for p in params]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_cuda_warmup_is_torch_adam_foreach_bit_for_bit() -> None:
    """Warmup on CUDA runs the _foreach kernels torch's Adam(foreach=True) runs, with the same scalars: the
    same values (Adam(foreach=False) differs there: CUDA divides by a CPU scalar through its reciprocal)."""
    ours, adam = _on("cuda", _params(0)), _on("cuda", _params(0))
    optimizer = QAdamOptimizer(ours, lr=LR, warmup_steps=10, betas=BETAS, eps=EPS, weight_decay=WD)
    torch_adam = torch.optim.Adam(adam, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, foreach=True)
    generator = torch.Generator().manual_seed(1)
    for step in range(1, 5):
        for a, b in zip(ours, adam):
            a.grad = torch.randn(a.shape, generator=generator).cuda()
            b.grad = a.grad.clone()
        optimizer.step()
        torch_adam.step()
        assert all(torch.equal(a, b) for a, b in zip(ours, adam)), step


def _frozen_case() -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], float, float]:
    """ResNet-50's first 40 tensors with moments after 7 steps, and that step's scalars."""
    generator = torch.Generator().manual_seed(2)
    shapes = resnet50_shapes()[:40]
    params = [torch.randn(s, generator=generator) for s in shapes]
    exp_avgs = [torch.randn(s, generator=generator) * 1e-2 for s in shapes]
    exp_avg_sqs = [torch.rand(s, generator=generator) * 1e-4 for s in shapes]
    return params, exp_avgs, exp_avg_sqs, -(LR / (1 - BETAS[0] ** 7)), (1 - BETAS[1] ** 7) ** 0.5


def _off_the_cpu_kernel(other: list[torch.Tensor], cpu: list[torch.Tensor], before: list[torch.Tensor]) -> float:
    """The largest difference of ``other`` from the CPU kernel's parameters, in eps of |update| + |parameter|."""
    eps32 = torch.finfo(torch.float32).eps
    return max(float(((theirs - ours).abs() / (eps32 * ((ours - old).abs() + ours.abs()))).max())
               for theirs, ours, old in zip(other, cpu, before))


def _frozen_update(params, exp_avgs, exp_avg_sqs, step_size: float, c: float, reciprocal: bool) -> list[torch.Tensor]:
    """The kernel's operations in its order on the CPU, every scalar a tensor, ``sqrt(v) / c`` computed as
    ``sqrt(v) * float(1 / c)`` when ``reciprocal`` (what torch's CUDA ``_foreach_div_`` by a scalar does: it
    "loses one bit of precision")."""
    def scalar(like: torch.Tensor, value: float) -> torch.Tensor:
        return torch.full_like(like, value)

    updated = []
    for p, m, v in zip(params, exp_avgs, exp_avg_sqs):
        root = v.double().sqrt().float()
        scaled = root.mul(scalar(v, 1.0 / c)) if reciprocal else root.div(scalar(v, c))
        updated.append(p + m.mul(scalar(m, step_size)).div(scaled.add(scalar(v, EPS))))
    return updated


def test_dividing_by_the_scalar_through_its_reciprocal_stays_within_two_eps() -> None:
    """The arithmetic the CUDA test below expects, on the CPU: with the reciprocal, 2,831 of 471,616 parameters
    differ from the kernel's (the count measured on an H200), each by less than 2 eps of |update| + |parameter|
    (here 1.45; up to 512 ulps of a parameter that nearly cancels with its update); with the division, none."""
    params, exp_avgs, exp_avg_sqs, step_size, c = _frozen_case()
    through_reciprocal = _frozen_update(params, exp_avgs, exp_avg_sqs, step_size, c, reciprocal=True)
    dividing = _frozen_update(params, exp_avgs, exp_avg_sqs, step_size, c, reciprocal=False)
    before = [p.clone() for p in params]
    for p, m, v in zip(params, exp_avgs, exp_avg_sqs):
        adam_update(p, m, v, step_size, c, EPS)
    assert sum(int((a != b).sum()) for a, b in zip(through_reciprocal, params)) == 2831
    assert _off_the_cpu_kernel(through_reciprocal, params, before) < 2.0
    assert all(torch.equal(a, b) for a, b in zip(dividing, params))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_cuda_the_frozen_update_is_the_cpu_kernels_with_the_reciprocal() -> None:
    """After warmup the update on CUDA is the native CPU kernel's arithmetic as _foreach kernels, dispatching a
    few operators for every tensor together, with one difference: torch's CUDA ``_foreach_div_`` by the scalar
    c multiplies by its reciprocal, so the parameters are bit for bit that arithmetic's (within 2 eps of the
    kernel's, the test above), not the kernel's (the momentum is left out)."""
    params, exp_avgs, exp_avg_sqs, step_size, c = _frozen_case()
    expected = _frozen_update(params, exp_avgs, exp_avg_sqs, step_size, c, reciprocal=True)
    on_cuda = [[t.cuda() for t in tensors] for tensors in (params, exp_avgs, exp_avg_sqs)]
    ops = count_aten_ops(lambda: _frozen_step(*on_cuda, step_size, c, EPS))
    differ = sum(int((theirs.cpu() != ours).sum()) for theirs, ours in zip(on_cuda[0], expected))
    assert differ == 0, f"{differ} of {sum(p.numel() for p in params)} parameters differ"
    assert ops < len(params), ops
