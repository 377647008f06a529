"""``find_unused_parameters=True``: parameters that receive no gradient leave the buckets.

After every backward the ranks agree (one allreduce MAX of a 0/1 mask over the parameters, in
registration order) on which parameters received a gradient on some rank. When that set differs from
the one the buckets were built for, the parameters to communicate (``build_params``) are the new set and the hooks rebuild
the buckets. Parameters that became used again were not in this step's buckets: their gradients are
communicated at once through buckets of their own (built by the algorithm as any other), so no rank
steps with a gradient the others did not average. A parameter used on some ranks only gets a zero
gradient on the others (as in torch DDP).

On a model sharded with FSDP2 no per-parameter hook sees a gradient arrive: FSDP2 reduce-scatters the
gradients of each ``fully_shard``-ed module and assigns (or adds to) the sharded parameters' ``.grad``,
leaving out a parameter that got no gradient. So when the first backward since the last exchange begins,
each sharded parameter's gradient is marked (which tensor, and a copy of its values when it has one: the
usual loop's ``zero_grad()`` leaves none, so nothing is copied), and at the end of the backward that
exchanges (before the buckets give zero gradients to those left without one) a parameter whose gradient is
new or changed since then was used; accumulated micro-batches (``no_sync``) count, as torch DDP's record of
used parameters does. A gradient that FSDP2 added exact zeros to counts as unused on that rank: it keeps
its values, as the exchange would have left them (a sum of zeros), and rejoins the buckets when it changes. A parameter that no rank used keeps no gradient (``None``),
as FSDP2 and torch's HSDP leave it, so the optimizer skips it.

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce")
    >>> state_of(model).unused.enabled = True    # what data_parallel.DistributedDataParallel sets
"""

from __future__ import annotations

import weakref

import torch

from bagua_core.lifecycle import warmup
from bagua_core.lifecycle.algorithm import group_tensors
from bagua_core.lifecycle.module_state import ModuleState, named_parameters
from bagua_core.lifecycle.tensor import local_shard
from bagua_core.runtime.communication import ReduceOp, allreduce_inplace
from bagua_core.lifecycle.scheduler import BucketScheduler

__all__ = ["agree_on_used_parameters", "forget_unused_sharded_gradients", "mark_sharded_gradients",
           "note_sharded_gradients"]


def _mark(grad: torch.Tensor | None) -> tuple[weakref.ref, torch.Tensor] | None:
    return None if grad is None else (weakref.ref(grad), local_shard(grad).detach().clone())


def _changed(mark: tuple[weakref.ref, torch.Tensor] | None, grad: torch.Tensor) -> bool:
    """Whether ``grad`` is another tensor than the one marked, or the same one with other values."""
    return mark is None or mark[0]() is not grad or not torch.equal(mark[1], local_shard(grad))


def mark_sharded_gradients(state: ModuleState) -> None:
    """A sharded model, when a backward begins (every rank): unless the last exchange's marks are still
    pending (a backward inside ``no_sync`` came first), mark each sharded parameter's gradient as it is now.
    The parameters are the units' (``state.shard``): during backward FSDP2's root may hold its unsharded
    parameters where the model's are."""
    if state.unused.marks is None:
        state.unused.marks = {id(p): _mark(p.grad) for unit in state.shard.units for p in unit.params}


def note_sharded_gradients(module: torch.nn.Module, state: ModuleState) -> set[str]:
    """A sharded model, at the end of a backward that exchanges, before its buckets are flushed: add to
    ``state.unused.seen`` the parameters whose gradient is new or changed since :func:`mark_sharded_gradients`
    and return the names of those without any gradient (the flush gives them zeros)."""
    marks, state.unused.marks = state.unused.marks or {}, None
    without = set()
    for name, param in named_parameters(module):
        grad = param.grad
        if grad is None:
            without.add(name)
            continue
        if _changed(marks.get(id(param)), grad):
            state.unused.seen.add(name)
    return without


def forget_unused_sharded_gradients(module: torch.nn.Module, state: ModuleState, without: set[str]) -> None:
    """After the ranks agreed on the used parameters: those that had no gradient before the flush and that no
    rank used get none again (the flush gave them zeros on every rank), as torch's HSDP leaves them."""
    used = state.unused.in_use
    if used is None or not without:
        return
    for name, param in named_parameters(module):
        if name in without and name not in used:
            param.grad = None


def _used_on_any_rank(module: torch.nn.Module, state: ModuleState) -> set[str]:
    names = [name for name, _ in named_parameters(module)]
    seen, state.unused.seen = state.unused.seen, set()
    mask = torch.tensor([1 if name in seen else 0 for name in names], dtype=torch.int32)
    allreduce_inplace(mask, op=ReduceOp.MAX, comm=state.process_group.get_global_communicator())
    return {name for name, used in zip(names, mask.tolist()) if used}


def _communicate_now(module: torch.nn.Module, state: ModuleState, names: set[str]) -> None:
    """Run the algorithm's bucket operations once over the gradients of ``names`` only."""
    impl = warmup.built_by(state)  # the warmup's while the impl warms up
    state.unused.in_use = names
    tensors = impl.init_tensors(module)
    buckets = impl.tensors_to_buckets(group_tensors(tensors, impl.bucket_size_bytes()), state.do_flatten)
    for bucket in buckets:
        bucket.process_group = state.process_group
        impl.init_operations(module, bucket)
    scheduler = BucketScheduler(buckets, state.process_group.worker)
    try:
        scheduler.wait()  # marks every tensor ready, launches in order, waits
    finally:
        scheduler.detach()


def agree_on_used_parameters(module: torch.nn.Module, state: ModuleState) -> bool:
    """At the end of backward (every rank): whether the used parameters changed, in which case the
    caller (``bagua_core.module.hooks``, which installed this step) rebuilds the buckets."""
    used = _used_on_any_rank(module, state)
    in_use = state.unused.in_use
    if in_use is None:
        in_use = {name for name, _ in named_parameters(module)}
    if used == in_use:
        return False
    newly_used = used - in_use
    if newly_used:
        _communicate_now(module, state, newly_used)
    state.unused.in_use = used
    return True
