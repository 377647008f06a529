"""Tensor proxies and buckets in one process: flattening, padding, views kept across grad replacement."""

from __future__ import annotations

import pytest
import torch

import bagua.torch_api  # noqa: F401  (adds the original's tensor methods, tested here)
from bagua_core.lifecycle.bucket import BaguaBucket


def _grad_tensor(param: torch.nn.Parameter, name: str) -> torch.nn.Parameter:
    param.bagua_ensure_grad()
    return param.ensure_bagua_tensor(name, "m", lambda p: p.grad, lambda p, v: setattr(p, "grad", v))


def test_tensor_proxy_methods() -> None:
    t = torch.arange(4.0)
    assert not t.is_bagua_tensor()
    assert t.ensure_bagua_tensor("t", "m") is t and t.is_bagua_tensor()
    assert t.bagua_getter_closure() is t
    u = t.to_bagua_tensor("u", "m")
    assert u.is_bagua_tensor() and u.data_ptr() == t.data_ptr() and u is not t
    p = torch.nn.Parameter(torch.ones(3))
    q = p.to_bagua_tensor("q")
    assert isinstance(q, torch.nn.Parameter) and q.data_ptr() == p.data_ptr()
    assert p.grad is None and torch.equal(p.bagua_ensure_grad().grad, torch.zeros(3))
    g = _grad_tensor(p, "p")
    assert g.bagua_getter_closure() is p.grad
    g.bagua_setter_closure(torch.full((3,), 7.0))
    assert torch.equal(p.grad, torch.full((3,), 7.0))
    storage = torch.zeros(10).untyped_storage()
    g.bagua_set_storage(storage, 4)
    assert torch.equal(p.grad, torch.full((3,), 7.0))
    assert p.grad.data_ptr() == torch.empty(0).set_(storage).data_ptr() + 4 * 4
    with pytest.raises(RuntimeError, match="not in a bucket"):
        torch.ones(1).ensure_bagua_tensor("lonely").bagua_mark_communication_ready()


def test_flattened_bucket_layout_and_padding() -> None:
    params = [torch.nn.Parameter(torch.randn(2, 3)), torch.nn.Parameter(torch.randn(5))]
    for i, p in enumerate(params):
        p.grad = torch.full_like(p, float(i + 1))
    tensors = [_grad_tensor(p, f"p{i}") for i, p in enumerate(params)]
    bucket = BaguaBucket(tensors, "b", flatten=True, alignment=4)
    assert bucket.padding == 1 and bucket.bytes() == 12 * 4
    assert bucket.check_flatten()
    copy = bucket.flattened_tensor()  # a copy, as the original's (algorithms make replicas with it)
    assert copy.tolist() == [1.0] * 6 + [2.0] * 5 + [0.0]
    copy.mul_(10)
    assert torch.equal(params[1].grad, torch.full((5,), 2.0))
    flat = bucket.buffer
    flat.mul_(10)  # operations on the buffer are seen by the gradients
    assert torch.equal(params[1].grad, torch.full((5,), 20.0))
    params[0].grad = torch.full((2, 3), 3.0)  # replaced (zero_grad(set_to_none) + backward)
    assert not bucket.check_flatten()
    assert bucket.flattened_tensor()[:6].tolist() == [3.0] * 6  # a copy when not flattened
    bucket.mark_ready(tensors[0])  # puts the new gradient back into its slot
    assert bucket.check_flatten() and flat[:6].tolist() == [3.0] * 6


def test_unflattened_bucket_write_back_and_ops_order() -> None:
    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    tensors = [_grad_tensor(p, f"p{i}") for i, p in enumerate(params)]
    bucket = BaguaBucket(tensors, "b", flatten=False)
    assert not bucket.check_flatten()
    bucket.write_back(torch.arange(5.0))
    assert params[0].grad.tolist() == [0.0, 1.0] and params[1].grad.tolist() == [2.0, 3.0, 4.0]
    calls: list[str] = []
    bucket.append_op(lambda b: calls.append(f"first:{b.name}"))
    bucket.append_op(lambda b: calls.append(f"second:{b.name}"))
    fired: list[BaguaBucket] = []
    bucket.on_ready = fired.append
    bucket.mark_ready(tensors[1])
    assert not fired and bucket.pending_tensors() == [tensors[0]]
    bucket.mark_ready(tensors[0])
    assert fired == [bucket]
    bucket.execute_ops()
    assert calls == ["first:b", "second:b"]
    bucket.clear_ops().execute_ops()
    assert len(calls) == 2


def test_bucket_errors() -> None:
    a = torch.zeros(2).ensure_bagua_tensor("a")
    b = torch.zeros(2, dtype=torch.float64).ensure_bagua_tensor("b")
    with pytest.raises(ValueError, match="cannot be flattened"):
        BaguaBucket([a, b], "mixed", flatten=True)
    with pytest.raises(ValueError, match="bagua tensor"):
        BaguaBucket([torch.zeros(1)], "plain", flatten=False)
    with pytest.raises(ValueError, match="alignment must be a positive integer"):
        BaguaBucket([a], "x", flatten=False, alignment=0)


def test_flattened_bucket_keeps_channels_last_gradients_in_their_layout() -> None:
    """A channels_last parameter's gradient slot has the parameter's strides (as DDP's bucket views do), so
    autograd accumulates into the slot without a layout copy; the flat order, write-back and restoring a
    replaced gradient all follow that layout."""
    conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    weight = _grad_tensor(conv.weight, "w")
    bias = _grad_tensor(conv.bias, "b")
    bucket = BaguaBucket([weight, bias], "b0", flatten=True)
    assert conv.weight.grad.stride() == conv.weight.stride() != torch.empty(conv.weight.shape).stride()
    assert bucket.check_flatten()
    conv.weight.grad = None  # zero_grad(set_to_none=True)
    bucket.bind_unset_views()
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    conv(x).square().sum().backward()
    assert bucket.check_flatten(), "the backward's gradient left the slot (a layout copy)"
    expected = [conv.weight.grad.clone(), conv.bias.grad.clone()]
    flat = bucket.flattened_tensor()
    assert torch.equal(flat, bucket.buffer)
    assert torch.equal(bucket.slot_of(flat, 0), expected[0]) and bucket.slot_of(flat, 0).stride() == conv.weight.stride()
    bucket.write_back(flat * 3)  # a copy laid out as the buffer goes back to the right elements
    assert torch.equal(conv.weight.grad, expected[0] * 3) and torch.equal(conv.bias.grad, expected[1] * 3)
    conv.weight.grad = expected[0].contiguous()  # replaced by a tensor in another layout
    bucket.restore_view(weight)
    assert bucket.check_flatten() and torch.equal(conv.weight.grad, expected[0])
