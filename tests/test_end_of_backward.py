"""The end of backward of a wrapped (replicated) module runs exactly once per backward that communicates, after
every gradient taking part in it is accumulated into ``.grad``: a parameter used twice, a parameter never used,
a frozen one, a ``no_sync`` micro-batch then a synced one, accumulation over two backwards, ``retain_graph``
twice, a backward through part of the model, a gradient a custom function leaves undefined, a reentrant
checkpoint (its parameters are accumulated by a nested backward, after the ones outside it), and none for a
``torch.autograd.grad`` through the model or a backward in eval mode.

Each case runs on the wrapped module and on a plain copy with the same weights (one rank: the average is the
local gradient); what the impl's post-backward hook sees at each end of backward must be the copy's gradients
after the matching backward (a gradient never set counts as zeros: the end of backward gives unused
parameters zeros)."""

from __future__ import annotations

import contextlib
import copy
from typing import Literal

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig, AlgorithmImpl
from bagua_core.lifecycle.bucket_ops.centralized import CentralizedSynchronousOp
from bagua_core.plugins import get_plugin_manager, hookimpl
from tests.distributed import run_workers


class EndRecorderConfig(AlgorithmConfig):
    name: Literal["end_recorder"] = "end_recorder"


class EndRecorderImpl(AlgorithmImpl):
    """Allreduce (average) per bucket; the post-backward hook records every parameter's gradient first."""

    def __init__(self, process_group) -> None:
        super().__init__(process_group)
        self.ends: list[dict[str, torch.Tensor]] = []

    def init_operations(self, bagua_module, bucket):
        super().init_operations(bagua_module, bucket)
        bucket.append_op(CentralizedSynchronousOp(average=True))

    def init_post_backward_hook(self, bagua_module):
        parent = super().init_post_backward_hook(bagua_module)

        def hook():
            self.ends.append(_grads(bagua_module))
            parent()

        return hook


class EndRecorderAlgorithm(Algorithm):
    name = "end_recorder"
    Config = EndRecorderConfig

    def reify(self, process_group):
        return EndRecorderImpl(process_group)


class EndRecorderPlugin:
    @hookimpl
    def bagua_register_algorithms(self):
        return [EndRecorderAlgorithm]


class NoScaleGrad(torch.autograd.Function):
    """``x * scale`` whose backward leaves ``scale``'s gradient undefined (autograd still reaches it)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return grad * scale, None


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(4, 8)
        self.shared = torch.nn.Linear(8, 8)  # used twice per forward
        self.frozen = torch.nn.Linear(8, 8).requires_grad_(False)
        self.head = torch.nn.Linear(8, 2)
        self.scale = torch.nn.Parameter(torch.full((8,), 0.5))  # its gradient is left undefined
        self.unused = torch.nn.Linear(4, 4)  # never in forward

    def forward(self, x: torch.Tensor, part: str = "full") -> torch.Tensor:
        if part == "head":  # a backward through the head only
            return self.head(torch.ones(x.shape[0], 8))
        if part == "checkpoint":  # fc1 and shared inside a reentrant checkpoint, the head outside
            inner = lambda t: self.shared(torch.relu(self.fc1(t)))  # noqa: E731
            return self.head(checkpoint(inner, x.requires_grad_(), use_reentrant=True))
        h = self.shared(torch.relu(self.fc1(x)))
        h = self.shared(torch.relu(self.frozen(h)))
        if part == "undefined":
            h = NoScaleGrad.apply(h, self.scale)
        return self.head(h)


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: (torch.zeros_like(p) if p.grad is None else p.grad.detach().clone())
            for name, p in model.named_parameters() if p.requires_grad}


def _x(step: int) -> torch.Tensor:
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(step))


def _used_twice_and_unused(model, no_sync, mark):
    model(_x(0)).sum().backward()
    mark(True)


def _no_sync_then_synced(model, no_sync, mark):
    with no_sync():
        model(_x(1)).sum().backward()
    mark(False)
    model(_x(2)).sum().backward()
    mark(True)


def _accumulation(model, no_sync, mark):
    for step in (3, 4):
        model(_x(step)).sum().backward()
        mark(True)


def _retain_graph(model, no_sync, mark):
    loss = model(_x(5)).sum()
    loss.backward(retain_graph=True)
    mark(True)
    loss.backward()
    mark(True)


def _part(model, no_sync, mark):
    model(_x(6), "head").sum().backward()
    mark(True)


def _undefined(model, no_sync, mark):
    model(_x(7), "undefined").sum().backward()
    mark(True)


def _reentrant_checkpoint(model, no_sync, mark):
    model(_x(8), "checkpoint").sum().backward()
    mark(True)


def _autograd_grad(model, no_sync, mark):
    out = model(_x(9)).sum()
    torch.autograd.grad(out, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
    mark(False)
    model(_x(10)).sum().backward()  # the next backward ends as usual
    mark(True)


def _eval(model, no_sync, mark):
    model.eval()
    try:
        model(_x(11)).sum().backward()
    finally:
        model.train()
    mark(False)


CASES = {f.__name__[1:]: f for f in (_used_twice_and_unused, _no_sync_then_synced, _accumulation, _retain_graph,
                                     _part, _undefined, _reentrant_checkpoint, _autograd_grad, _eval)}


def _run(rank: int, find_unused: bool) -> dict[str, str]:
    """Each case on the wrapped module and its plain copy; the case's name -> what differs ("" when nothing)."""
    from bagua_core.lifecycle.module_state import state_of

    pm = get_plugin_manager()
    plugin = EndRecorderPlugin()
    pm.register(plugin, name="end-recorder-inline")
    try:
        reference = Net()
        model = copy.deepcopy(reference)
        model = model.with_bagua([torch.optim.SGD(model.parameters(), lr=0.1)], {"name": "end_recorder"})
        state_of(model).unused.enabled = find_unused
        impl = model.bagua_algorithm
        found = {}
        for name, case in CASES.items():
            for m in (model, reference):
                for p in m.parameters():
                    p.grad = None
            expected: list[dict[str, torch.Tensor]] = []
            case(reference, contextlib.nullcontext, lambda synced: synced and expected.append(_grads(reference)))
            impl.ends.clear()
            try:
                case(model, model.no_sync, lambda synced: None)
            except Exception as error:  # noqa: BLE001 (reported with the case's name)
                found[name] = f"raised {error!r}"
                continue
            ends = impl.ends
            if len(ends) != len(expected):
                found[name] = f"{len(ends)} ends of backward, expected {len(expected)}"
                continue
            wrong = [f"end {i}: {n}" for i, (end, want) in enumerate(zip(ends, expected))
                     for n in want if not torch.equal(end[n], want[n])]
            found[name] = "gradients not all accumulated at the end of backward: " + ", ".join(wrong) if wrong else ""
        return found
    finally:
        pm.unregister(plugin)


@pytest.mark.parametrize("find_unused", [False, True])
def test_end_of_backward_once_after_every_gradient(find_unused: bool) -> None:
    found = run_workers(_run, 1, find_unused)[0]
    assert set(found) == set(CASES)
    failed = {name: what for name, what in found.items() if what}
    assert not failed, failed
