"""``fuse_optimizer``: step any element-wise torch optimizer on a few flat tensors instead of many small
ones, with exactly the results of the unfused optimizer.

``fuse_optimizer`` copies the parameters of each param group (per dtype and device) into one buffer and
makes them views of it, gradients likewise. ``fuse_step`` finds the runs of parameters whose data and
gradients are contiguous, steps the optimizer on one flat tensor per run (the param list is swapped for
the flat tensors during the step) and keeps each parameter's optimizer state as views of the flat state,
so ``optimizer.state_dict()``, plain ``optimizer.step()`` and checkpoints keep working. With
``check_flatten`` it first copies back whatever was moved out of the buffers (``zero_grad()`` setting
gradients to None, a bagua bucket, ``param.data = ...``). Nothing is communicated.

Optimizers whose update is not element-wise (LBFGS, SparseAdam, Adafactor, unknown third-party
classes) fall back to the unfused step, so results stay identical. A third-party optimizer whose update
is element-wise declares it with the attribute ``bagua_elementwise_step = True``; during a fused step
each flat tensor's ``bagua_fused_params`` lists the parameters it stands for (in memory order). What
fusing adds to the optimizer is one :class:`FuseState` at its bagua attribute (``fuse_state_of``).

Example::

    >>> optimizer = fuse_optimizer(torch.optim.Adam(model.parameters(), lr=1e-3))
    >>> model = model.with_bagua([optimizer], "gradient_allreduce", do_flatten=False)
    >>> loss.backward()
    >>> optimizer.fuse_step()          # or fuse_step(optimizer)
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from bagua_core.lifecycle.state import get_state, set_state
from bagua_contrib.fused_optimizer.flatten import (
    FlatBuffer,
    calculate_mutual_groups,
    contiguous_runs,
    flatten_param_groups,
    storage_view,
)

__all__ = ["FuseState", "calculate_mutual_groups", "fuse_optimizer", "fuse_state_of", "fuse_step",
           "is_fused_optimizer"]

_ELEMENTWISE = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adamax, torch.optim.NAdam,
                torch.optim.RAdam, torch.optim.RMSprop, torch.optim.Adagrad, torch.optim.Adadelta,
                torch.optim.ASGD, torch.optim.Rprop)


@dataclass(slots=True, eq=False)
class FuseState:
    """What ``fuse_optimizer`` adds to an optimizer."""

    do_flatten: bool
    """The parameters and gradients were laid out in flat buffers when fusing."""
    check_flatten: bool
    """Before each fused step, copy back into the buffers whatever was moved out of them."""
    buffers: list[FlatBuffer] = field(default_factory=list)
    """The flat buffers (one per param group, dtype and device), when ``do_flatten``."""
    flats: dict[tuple, torch.Tensor] = field(default_factory=dict)
    """Run key -> the flat tensor stepped for that run of contiguous parameters."""
    stash: dict[tuple, dict] = field(default_factory=dict)
    """Run key -> the flat optimizer state of that run."""
    fused_count: int = 0
    """+1 per param group and fused step in which some parameters were fused (the original's
    ``optimizer._bagua_fused_count``, which ``bagua.torch_api.contrib`` keeps)."""
    warned: bool = False
    """Whether the warning for an optimizer not known to be element-wise was given."""


def fuse_state_of(optimizer: torch.optim.Optimizer) -> FuseState | None:
    """The fused optimizer's state, or None when ``optimizer`` is not fused.

    Example::

        >>> fuse_state_of(fuse_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))).fused_count
        0
    """
    return get_state(optimizer, FuseState)


def is_fused_optimizer(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``fuse_optimizer`` was applied to ``optimizer``."""
    return fuse_state_of(optimizer) is not None


def fuse_optimizer(optimizer: torch.optim.Optimizer, do_flatten: bool = True,
                   check_flatten: bool = True) -> torch.optim.Optimizer:
    """Fuse ``optimizer`` in place and return it; it gains ``optimizer.fuse_step(closure=None)``.

    ``do_flatten``: lay the parameters and gradients out in flat buffers now (otherwise only parameters
    that are already contiguous, e.g. flattened by someone else, are fused). ``check_flatten``: before
    each fused step, copy back into the buffers whatever was moved out of them.
    """
    if is_fused_optimizer(optimizer):
        raise RuntimeError("this optimizer is already fused; call fuse_optimizer once per optimizer")
    state = FuseState(do_flatten, check_flatten)
    if do_flatten:
        state.buffers = flatten_param_groups(optimizer)
    set_state(optimizer, state)
    optimizer.fuse_step = types.MethodType(fuse_step, optimizer)
    return optimizer


def _is_elementwise_state(value: Any, numel: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() == 1 and value.numel() == numel


def _views_of(run: list[torch.Tensor], flat_state: dict, optimizer: torch.optim.Optimizer) -> bool:
    """Whether every parameter's state is still a view of ``flat_state`` (nobody loaded a state dict)."""
    total, off = sum(p.numel() for p in run), 0
    for p in run:
        mine = optimizer.state.get(p)
        if not mine or mine.keys() != flat_state.keys():
            return False
        for key, value in flat_state.items():
            if _is_elementwise_state(value, total):
                if mine[key].data_ptr() != value[off:].data_ptr():
                    return False
            elif not _same(mine[key], value):  # scalars (``step``) are per-parameter copies
                return False
        off += p.numel()
    return True


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool(
            torch.equal(a, b))
    return a == b


def _merge_states(run: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> dict | None:
    """The flat state built from per-parameter states; ``{}`` if none has state; ``None`` if they cannot
    be merged (some have state and some not, or scalars such as ``step`` differ)."""
    states = [optimizer.state.get(p) or {} for p in run]
    if not any(states):
        return {}
    if not all(states) or any(s.keys() != states[0].keys() for s in states):
        return None
    merged = {}
    for key, first in states[0].items():
        values = [s[key] for s in states]
        if all(isinstance(v, torch.Tensor) and v.shape == p.shape for v, p in zip(values, run, strict=True)):
            merged[key] = torch.cat([v.detach().reshape(-1) for v in values])
        elif all(_same(v, first) for v in values):
            merged[key] = first.clone() if isinstance(first, torch.Tensor) else first
        else:
            return None
    return merged


def _split_state(run: list[torch.Tensor], flat_state: dict, optimizer: torch.optim.Optimizer) -> None:
    total, off = sum(p.numel() for p in run), 0
    for p in run:
        optimizer.state[p] = {
            key: value[off:off + p.numel()].view_as(p) if _is_elementwise_state(value, total) else (
                value.clone() if isinstance(value, torch.Tensor) else value)  # a plain step bumps each one
            for key, value in flat_state.items()
        }
        off += p.numel()


def _flat_for(run: list[torch.Tensor], state: FuseState) -> tuple[tuple, torch.Tensor]:
    total = sum(p.numel() for p in run)
    key = (tuple(id(p) for p in run), run[0].data_ptr(), total)
    flat = state.flats.get(key)
    if flat is None:
        flat = storage_view(run[0].detach(), total)
        flat.bagua_fused_params = run  # an optimizer that keeps per-parameter bookkeeping finds them here
        state.flats[key] = flat
    flat.grad = storage_view(run[0].grad, total)
    return key, flat


def fuse_step(optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
    """One optimizer step over the flat tensors (see the module docstring); returns ``closure()``'s loss."""
    state = fuse_state_of(optimizer)
    if state is None:
        raise RuntimeError("fuse_step needs an optimizer fused with fuse_optimizer(optimizer)")
    if not (isinstance(optimizer, _ELEMENTWISE) or getattr(optimizer, "bagua_elementwise_step", False)):
        if not state.warned:
            warnings.warn(f"{type(optimizer).__name__} is not known to be element-wise; fuse_step runs the "
                          f"unfused step", stacklevel=2)
            state.warned = True
        return optimizer.step(closure)
    loss = None
    if closure is not None:  # evaluate first: the closure may replace the gradients
        with torch.enable_grad():
            loss = closure()
    if state.check_flatten:
        for buffer in state.buffers:
            buffer.restore()
    originals = [group["params"] for group in optimizer.param_groups]
    fused: list[tuple[tuple, torch.Tensor, list[torch.Tensor]]] = []
    fused_groups: list[tuple[dict]] = []
    try:
        for group in optimizer.param_groups:
            params = []
            for run in contiguous_runs(group["params"]):
                if len(run) == 1:
                    params.append(run[0])
                    continue
                key, flat = _flat_for(run, state)
                flat_state = state.stash.get(key)
                if flat_state is None or not _views_of(run, flat_state, optimizer):
                    flat_state = _merge_states(run, optimizer)
                if flat_state is None:  # per-parameter states that cannot be merged: step them one by one
                    params.extend(run)
                    continue
                if flat_state:
                    optimizer.state[flat] = flat_state
                params.append(flat)
                fused.append((key, flat, run))
                fused_groups.append((group,))
            group["params"] = params
        optimizer.step()
    finally:
        for group, params in zip(optimizer.param_groups, originals, strict=True):
            group["params"] = params
        stash, state.stash = state.stash, {}
        for key, flat, run in fused:
            flat_state = optimizer.state.pop(flat, None) or stash.get(key)
            if flat_state:
                state.stash[key] = flat_state
                _split_state(run, flat_state, optimizer)
        state.flats = {key: flat for key, flat, _ in fused}  # forget runs that no longer exist
        state.fused_count += len({id(group) for group, *_ in fused_groups})
    return loss
