"""Installs the lifecycle hooks of a wrapped module (forward pre-hook, per-parameter backward hooks or, on a
model sharded with FSDP2, FSDP2's reduce-scatter hook, the end-of-backward callback, the optimizer step
hooks) and rebuilds its buckets. The hooks read and keep what they need in the module's ``ModuleState``
(``bagua_core.lifecycle.module_state``), which each of them is handed when installed."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import torch

from bagua_core.lifecycle import warmup
from bagua_core.lifecycle.algorithm import group_tensors
from bagua_core.lifecycle.module_state import ImplHooks, ModuleState, named_parameters
from bagua_core.lifecycle.state import clear_state, tensor_state_of
from bagua_core.lifecycle.tensor import register_shards
from bagua_core.runtime.failure import Guard
from bagua_core.runtime.failure.record import state as failure_state
from bagua_core.module import sharded
from bagua_core.module.nonfinite import agree_on_nonfinite_gradients
from bagua_core.lifecycle.scheduler import BucketScheduler
from bagua_core.lifecycle.hook_time import timed
from bagua_core.module.unused_params import (
    agree_on_used_parameters,
    forget_unused_sharded_gradients,
    mark_sharded_gradients,
    note_sharded_gradients,
)

__all__ = ["install", "uninstall", "rebuild_buckets"]

_FORWARD = Guard("the forward pre-hook of a wrapped module")
_BACKWARD = Guard("the backward hook of a wrapped module")
_END_OF_BACKWARD = Guard("the end of backward of a wrapped module")
_OPTIMIZER_STEP = Guard("the optimizer step hook of a wrapped module")
_STEP_END = Guard("the step-end hook of a wrapped module")
_AFTER_STEP = Guard("a feature's after-step hook of a wrapped module")
"""Each hook's failure guard (``bagua_core.runtime.failure``): what it raises is translated, naming the hook."""


def rebuild_buckets(module: torch.nn.Module, state: ModuleState) -> None:
    """Steps 2-4 of the lifecycle: init_tensors, tensors_to_buckets, init_operations (and the impl's hooks); the
    core's warmup's instead while the impl is warming up (``bagua_core.lifecycle.warmup``)."""
    impl = warmup.builds_buckets(module, state)
    old = state.scheduler
    if old is not None:
        old.synchronize()
        old.detach()
        for bucket in state.buckets:
            for tensor in bucket.tensors:  # a parameter left out of the new buckets is in none
                tensor_state_of(tensor).bucket = None
    tensors = impl.init_tensors(module)
    if state.shard is not None:  # one bucket per FSDP2 unit: its gradients come together
        groups = sharded.group_by_unit(tensors, state.shard.units)
    else:
        groups = group_tensors(tensors, impl.bucket_size_bytes())
    buckets = impl.tensors_to_buckets(groups, state.do_flatten)
    for bucket in buckets:
        bucket.process_group = state.process_group
        impl.init_operations(module, bucket)
    state.buckets = buckets
    state.lending.buckets = sharded.lend_buckets(buckets, state.shard.units) if state.shard is not None else {}
    state.lending.verified = False
    ready_hook = impl.init_bucket_ready_hook(module)
    state.scheduler = BucketScheduler(buckets, state.process_group.worker, ready_hook)
    state.hooks = ImplHooks(
        bucket_ready=ready_hook,
        backward=impl.init_backward_hook(module),
        post_backward=impl.init_post_backward_hook(module),
        forward_pre=impl.init_forward_pre_hook(module),
        post_optimizer_step=impl.init_post_optimizer_step_hook(module),
        step_end=impl.init_step_end_hook(module),
    )


def _make_forward_pre_hook(state: ModuleState):
    def hook(module: torch.nn.Module, inputs: Any) -> None:
        if not module.training:
            return
        with timed(state), _FORWARD:
            _before_forward(module, state, inputs)

    return hook


def _before_forward(module: torch.nn.Module, state: ModuleState, inputs: Any) -> None:
    if state.shard is not None:  # the weights bagua holds are the shards, whatever the last forward left
        register_shards(module)
    state.train_step_counter += 1
    state.stepped = set()
    featured = [feature.before_forward(module) for feature in state.features]  # (every one is asked)
    asked = state.impl.need_reset()  # (asked even when a feature asked: an impl may clear its flag as it answers)
    switched = warmup.switches(module, state)  # the warmup begins or ends here (of the impl need_reset left)
    if any(featured) or switched or asked:
        rebuild_buckets(module, state)
    if torch.is_grad_enabled():  # a forward that backward may follow (not an evaluation under no_grad)
        for bucket in state.buckets:
            bucket.bind_unset_views()
    state.hooks.forward_pre(inputs)


def _queue_end_of_backward(module: torch.nn.Module, state: ModuleState) -> None:
    """Run bagua's end of backward when the autograd engine's run of this backward is over: after every
    gradient of it is accumulated, nested backwards included. torch's private ``queue_callback`` (what torch DDP
    and FSDP2 use too) is the one call that runs there; no public hook does, on either path:

    - replicated: ``torch.autograd.graph.register_multi_grad_hook`` over the parameters (with the per-parameter
      post-accumulate hooks counting which accumulated) finds the last parameter of one graph task, not the
      end of a backward: a reentrant checkpoint (``torch.utils.checkpoint(use_reentrant=True)``) accumulates its
      parameters in a nested backward that runs after the outer one's own parameters, so the end found so
      comes before theirs, and once per nested backward; and, on leaf tensors, that hook raises inside a
      ``torch.autograd.grad`` that takes a parameter among its inputs ("A leaf node was passed to
      _will_engine_execute_node ..."), where today nothing runs. ``tests/test_end_of_backward.py`` has both
      cases. (It would also cost about 4 us per parameter per backward: three hooks where one serves.)
    - sharded (FSDP2): the gradients are the shards FSDP2 reduce-scatters and assigns, the last of them in its
      own end-of-backward callback (queued the same way); a callback queued after it is the one point that
      sees them (:func:`_make_output_hook`)."""
    state.post_backward_queued = True
    state.scheduler.in_backward = True
    torch.autograd.Variable._execution_engine.queue_callback(lambda: _post_backward(module, state))


def _make_backward_hook(module: torch.nn.Module, state: ModuleState, name: str):
    def hook(param: torch.Tensor) -> None:
        if not module.training or not state.sync_enabled:
            return
        if not state.post_backward_queued:
            _queue_end_of_backward(module, state)
        if state.unused.enabled:
            state.unused.seen.add(name)
        with timed(state), _BACKWARD:
            state.hooks.backward(name, param)

    return hook


def _tensors_in(output: Any) -> list[torch.Tensor]:
    """The tensors of a module's output, whatever its structure: a tensor (a subclass such as ``DTensor``
    included, not looked into), and what tuples (namedtuples, ``torch.return_types``), lists, deques, dicts
    (``OrderedDict`` and other subclasses, Hugging Face's ``ModelOutput`` among them) and dataclass instances
    hold, at any depth. What ``torch.utils._pytree.tree_leaves`` found, without its private module: pytree
    also walks the nodes registered with it (``register_pytree_node``: a class of the user's own, for one),
    which this does not; it leaves dict subclasses it does not know and dataclasses unregistered with it
    alone, which this walks; neither looks into sets. A container met twice is walked once."""
    found: list[torch.Tensor] = []
    pending, seen = [output], set()
    while pending:
        item = pending.pop()
        if isinstance(item, torch.Tensor):
            found.append(item)
            continue
        if id(item) in seen:
            continue
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, (tuple, list, collections.deque)):
            children = list(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            children = [getattr(item, field.name) for field in dataclasses.fields(item)]
        else:
            continue
        seen.add(id(item))
        pending.extend(reversed(children))
    return found


def _make_output_hook(module: torch.nn.Module, state: ModuleState):
    """A model sharded with FSDP2: its parameters' gradients are the reduce-scattered shards FSDP2 sets, not
    accumulated by autograd, so no per-parameter hook sees them (FSDP2 hands them to bagua through its
    reduce-scatter hook, ``sharded.UnitHandoff``). This forward hook hooks the outputs instead: when backward
    reaches them, the end-of-backward callback is queued, after FSDP2's own (its hooks on the same outputs of
    the root were registered first), so it finds the final shards. With ``find_unused_parameters`` it also marks
    the gradients as this backward begins (``unused_params``: no per-parameter hook sees them arrive)."""

    def queue(grad: torch.Tensor) -> None:
        if state.unused.enabled:  # (inside no_sync too: its micro-batches' gradients count)
            mark_sharded_gradients(state)
        if not state.post_backward_queued and state.sync_enabled:
            _queue_end_of_backward(module, state)

    def hook(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if not module.training or not torch.is_grad_enabled():
            return
        for tensor in _tensors_in(output):
            if tensor.requires_grad:
                tensor.register_hook(queue)

    return hook


def _post_backward(module: torch.nn.Module, state: ModuleState) -> None:
    state.post_backward_queued = False
    state.scheduler.in_backward = False
    with timed(state), _END_OF_BACKWARD:
        _end_of_backward(module, state)


def _end_of_backward(module: torch.nn.Module, state: ModuleState) -> None:
    finding = state.unused.enabled
    without = note_sharded_gradients(module, state) if finding and state.shard is not None else set()
    try:
        state.hooks.post_backward()
    finally:
        verify = not state.lending.verified  # the first step that lends a buffer after a rebuild checks FSDP2's layout
        for bucket in state.lending.buckets.values():  # FSDP2's gradients are views of it now; the bucket lets go
            lent = bucket.buffer
            bucket.lend(None)
            if verify and lent is not None:
                sharded.verify_lent_layout(bucket, lent)
                state.lending.verified = True
    if finding and agree_on_used_parameters(module, state):
        rebuild_buckets(module, state)
    if without:
        forget_unused_sharded_gradients(module, state, without)
    if state.capabilities.communicates_after_optimizer_step and \
            state.impl.communicates_after_optimizer_step(module):
        agree_on_nonfinite_gradients(module)  # every rank's GradScaler then skips the same steps
    for feature in state.features:  # between the exchange and the optimizer step
        feature.before_optimizer_step(module)


def _post_step(module: torch.nn.Module, state: ModuleState, optimizer: torch.optim.Optimizer) -> None:
    with timed(state), _OPTIMIZER_STEP:
        state.hooks.post_optimizer_step(optimizer)
    if not state.mark_stepped(optimizer):
        return
    if state.hooks.step_end is not None:
        with timed(state), _STEP_END:
            state.hooks.step_end()
    if state.features:
        with _AFTER_STEP:
            for feature in state.features:
                feature.after_step(module)


def install(module: torch.nn.Module, state: ModuleState) -> None:
    """Steps 2-8: build buckets, register every hook, keep the handles in ``state`` for :func:`uninstall`."""
    rebuild_buckets(module, state)
    # a model sharded with FSDP2: bagua's pre-forward runs before FSDP2's all-gather (the weights an algorithm
    # changes there, or rebuilds its buckets on, are the shards, not the gathered parameters of this forward)
    handles = [module.register_forward_pre_hook(_make_forward_pre_hook(state), prepend=state.shard is not None)]
    if state.shard is not None:  # FSDP2 hands the gradients over; the end of backward is found from the outputs
        handles += sharded.install(state)
        handles.append(module.register_forward_hook(_make_output_hook(module, state)))
    else:
        for name, param in named_parameters(module):
            handles.append(param.register_post_accumulate_grad_hook(_make_backward_hook(module, state, name)))
    for optimizer in state.optimizers:
        handles.append(
            optimizer.register_step_post_hook(lambda opt, args, kwargs: _post_step(module, state, opt))
        )
    state.handles = handles


def uninstall(module: torch.nn.Module, state: ModuleState) -> None:
    """Remove every hook, wait for pending communication, let the impl release what it holds, and drop
    the module's state (the module is plain again)."""
    for handle in state.handles:
        handle.remove()
    state.handles = []
    scheduler = state.scheduler
    if scheduler is not None:
        if failure_state.failure is None:  # after a failure, what is pending never completes
            scheduler.synchronize()
        scheduler.detach()
    state.scheduler = None
    for bucket in state.lending.buckets.values():
        bucket.lend(None)
    try:
        for feature in state.features:
            feature.unwrap(module)
    finally:
        try:
            state.impl.shutdown(module)
        finally:
            clear_state(module)
