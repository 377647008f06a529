"""The public torch calls that replaced private ones (tests/test_private_fields.py, ``KNOWN_PRIVATE_TORCH``) give
callers what the private ones gave: ``has_nonfinite`` (``_foreach_norm`` with ``ord=inf``, where GradScaler's
``_amp_foreach_non_finite_check_and_unscale_`` was) finds inf, -inf and NaN anywhere and nothing in finite
extremes; q_adam's ``unscale_gradients`` (``_foreach_mul_``) writes the bits GradScaler's kernel writes; the
output walker of a sharded model's hooks finds the tensors ``torch.utils._pytree.tree_leaves`` found."""

from __future__ import annotations

import collections
import dataclasses
from typing import NamedTuple

import pytest
import torch
import torch.utils._pytree as pytree  # the reference the walker replaced (tests only)

from bagua_algorithms.q_adam.loss_scaling import unscale_gradients
from bagua_core.module.hooks import _tensors_in
from bagua_core.module.nonfinite import has_nonfinite

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
AMP_KERNEL = getattr(torch, "_amp_foreach_non_finite_check_and_unscale_")  # the private kernel, as a reference


def _amp_found(tensors: list[torch.Tensor]) -> bool:
    """What the private kernel said (with a scale of 1, so nothing changes)."""
    found = torch.zeros(1)
    AMP_KERNEL([t.clone() for t in tensors], found, torch.ones(1))
    return bool(found.item())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("value", [float("inf"), -float("inf"), float("nan")])
@pytest.mark.parametrize("where", [0, 517, 1032])
def test_inf_and_nan_are_found_anywhere(dtype: torch.dtype, value: float, where: int) -> None:
    bad = torch.randn(1033, generator=torch.Generator().manual_seed(where)).to(dtype)
    bad[where] = value
    tensors = [torch.empty(0, dtype=dtype), torch.ones(3, dtype=dtype), bad, torch.zeros(5, dtype=dtype),
               torch.arange(4), torch.ones(2)]
    assert has_nonfinite(tensors)
    assert has_nonfinite([bad])
    assert _amp_found([bad])


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
def test_finite_extremes_are_not_found(dtype: torch.dtype) -> None:
    info = torch.finfo(dtype)
    extremes = torch.tensor([info.max, -info.max, info.tiny, -info.tiny, 0.0, -0.0], dtype=dtype)
    subnormal = torch.full((7,), info.tiny, dtype=dtype) / 4
    full = torch.full((5000,), info.max, dtype=dtype)  # a 2-norm of it would overflow
    tensors = [torch.empty(0, dtype=dtype), extremes, subnormal, full]
    assert not has_nonfinite(tensors)
    assert not _amp_found(tensors)


def test_what_is_skipped_and_nothing() -> None:
    assert not has_nonfinite([])
    assert not has_nonfinite([torch.empty(0), torch.empty(0, dtype=torch.float16)])
    assert not has_nonfinite([torch.tensor([2**31 - 1], dtype=torch.int32), torch.tensor([True])])  # skipped
    assert not has_nonfinite([torch.tensor([complex("inf")])])  # not floating point: skipped, as before
    mixed = [torch.ones(2, dtype=torch.float16), torch.tensor([1.0, float("nan")], dtype=torch.float64)]
    assert has_nonfinite(mixed)


def test_one_bad_tensor_among_many_of_each_dtype() -> None:
    for dtype in FLOATS:
        tensors = [torch.randn(n).to(dtype) for n in range(1, 60)]
        assert not has_nonfinite(tensors)
        tensors[37][-1] = float("nan")
        assert has_nonfinite(tensors)


def test_it_keeps_out_of_autograd() -> None:
    x = torch.ones(3, requires_grad=True)
    assert not has_nonfinite([x * 2])
    assert x.grad is None


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


@pytest.mark.parametrize("scale", [65536.0, 3.0, 7.123456, 2.0**30, 1e-3, 1.0, 2.0**-20])
def test_unscale_writes_the_bits_of_the_grad_scaler_kernel(scale: float) -> None:
    inv_scale = torch.tensor(scale, dtype=torch.float64).reciprocal().float()  # as the optimizer makes it
    generator = torch.Generator().manual_seed(0)
    params = []
    for dtype in FLOATS + [torch.float64]:
        for n in (0, 1, 7, 1000):
            param = torch.nn.Parameter(torch.zeros(n, dtype=dtype))
            param.grad = (torch.randn(n, generator=generator) * 1000).to(dtype)
            if n == 1000:
                param.grad[3], param.grad[4], param.grad[5] = float("inf"), float("nan"), torch.finfo(dtype).max
            params.append(param)
    params.append(torch.nn.Parameter(torch.zeros(2)))  # no gradient
    expected = [p.grad.clone() for p in params if p.grad is not None]
    for dtype in {t.dtype for t in expected}:
        AMP_KERNEL([t for t in expected if t.dtype == dtype], torch.zeros(1), inv_scale)
    unscale_gradients(params, inv_scale)
    got = [p.grad for p in params if p.grad is not None]
    for want, have in zip(expected, got, strict=True):
        assert want.dtype == have.dtype and torch.equal(_bits(want), _bits(have)), (want.dtype, scale)


class Pair(NamedTuple):
    first: torch.Tensor
    second: object


class ModelOutputLike(collections.OrderedDict):
    """Hugging Face's ModelOutput is an OrderedDict subclass (it registers itself with pytree)."""


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    extra: dict
    note: str = "x"


def test_the_walker_finds_what_pytree_found() -> None:
    a, b, c, d = (torch.full((1,), float(i)) for i in range(4))
    structures = [
        a,
        (a, [b, {"x": c, "y": (d, None, 3)}], "text"),
        Pair(a, [b, c]),
        collections.OrderedDict(x=a, y=[b]),
        collections.defaultdict(list, x=[a, b]),
        collections.deque([a, (b, c)]),
        torch.max(torch.stack([a, b]), dim=0),  # a torch.return_types structseq
        [[], (), {}, None, 1.5, a, {"deep": [[[[b]]]]}],
    ]
    for structure in structures:
        want = [t for t in pytree.tree_leaves(structure) if isinstance(t, torch.Tensor)]
        got = _tensors_in(structure)
        assert len(got) == len(want) and all(x is y for x, y in zip(got, want)), structure


def test_the_walker_goes_where_pytree_did_not() -> None:
    a, b, c = torch.ones(1), torch.ones(2), torch.ones(3)
    assert [t is x for t, x in zip(_tensors_in(ModelOutputLike(logits=a, hidden=(b, c))), (a, b, c))] == [True] * 3
    found = _tensors_in(Output(a, {"h": [b]}))
    assert len(found) == 2 and found[0] is a and found[1] is b
    assert _tensors_in({a, 1}) == []  # sets are leaves, as in pytree
    assert _tensors_in("text") == [] and _tensors_in(None) == []


def test_the_walker_ends_on_a_cycle_and_keeps_repeated_tensors() -> None:
    a = torch.ones(1)
    loop: list = [a]
    loop.append(loop)
    assert len(_tensors_in(loop)) == 1
    assert len(_tensors_in((a, a))) == 2  # as pytree: a tensor met twice is hooked twice (the hook is idempotent)
