"""Installs the lifecycle hooks of a wrapped module (forward pre-hook, per-parameter backward hooks,
end-of-backward callback, optimizer post-step hook) and rebuilds its buckets. The hooks read and keep
what they need in the module's ``ModuleState`` (``bagua_core.lifecycle.module_state``), which each of
them is handed when installed."""

from __future__ import annotations

from typing import Any

import torch

from bagua_core.runtime import env
from bagua_core.lifecycle.algorithm import group_tensors
from bagua_core.lifecycle.module_state import ModuleState
from bagua_core.lifecycle.state import clear_state, tensor_state_of
from bagua_core.lifecycle.tensor import register_shards
from bagua_core.selection.autotune import on_train_step as _autotune_on_train_step
from bagua_core.runtime.failure import call_guarded
from bagua_core.runtime.failure.record import state as failure_state
from bagua_core.module.nonfinite import agree_on_nonfinite_gradients
from bagua_core.lifecycle.scheduler import BucketScheduler
from bagua_core.module.unused_params import agree_on_used_parameters

__all__ = ["install", "uninstall", "rebuild_buckets"]


def rebuild_buckets(module: torch.nn.Module, state: ModuleState) -> None:
    """Steps 2-4 of the lifecycle: init_tensors, tensors_to_buckets, init_operations."""
    impl = module.bagua_algorithm
    old = state.scheduler
    if old is not None:
        old.synchronize()
        old.detach()
        for bucket in getattr(module, "bagua_buckets", ()):
            for tensor in bucket.tensors:  # a parameter left out of the new buckets is in none
                tensor_state_of(tensor).bucket = None
    tensors = impl.init_tensors(module)
    bucket_size = impl.bucket_size_bytes() if hasattr(impl, "bucket_size_bytes") else env.get_default_bucket_size()
    buckets = impl.tensors_to_buckets(group_tensors(tensors, bucket_size), state.do_flatten)
    for bucket in buckets:
        bucket.process_group = module.process_group
        impl.init_operations(module, bucket)
    module.bagua_buckets = buckets
    ready_hook = impl.init_bucket_ready_hook(module) if hasattr(impl, "init_bucket_ready_hook") else None
    state.bucket_ready_hook = ready_hook
    state.scheduler = BucketScheduler(buckets, module.process_group.worker, ready_hook)
    state.backward_hook = impl.init_backward_hook(module)
    state.post_backward_hook = impl.init_post_backward_hook(module)
    state.forward_pre_hook = impl.init_forward_pre_hook(module)
    state.post_step_hook = impl.init_post_optimizer_step_hook(module)


def _make_forward_pre_hook(state: ModuleState):
    def hook(module: torch.nn.Module, inputs: Any) -> None:
        if not module.training:
            return
        call_guarded("the forward pre-hook of a wrapped module", _before_forward, module, state, inputs)

    return hook


def _before_forward(module: torch.nn.Module, state: ModuleState, inputs: Any) -> None:
    if state.shard is not None:  # the weights bagua holds are the shards, whatever the last forward left
        register_shards(module)
    module.bagua_train_step_counter += 1
    _autotune_on_train_step(module)  # off unless BAGUA_AUTOTUNE=1 / autotune.configure(module)
    if module.bagua_algorithm.need_reset():
        rebuild_buckets(module, state)
    if torch.is_grad_enabled():  # a forward that backward may follow (not an evaluation under no_grad)
        for bucket in module.bagua_buckets:
            bucket.bind_unset_views()
    state.forward_pre_hook(inputs)


def _make_backward_hook(module: torch.nn.Module, state: ModuleState, name: str):
    def hook(param: torch.Tensor) -> None:
        if not module.training or not state.sync_enabled:
            return
        if not state.post_backward_queued:
            state.post_backward_queued = True
            state.scheduler.in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(lambda: _post_backward(module, state))
        if state.find_unused_parameters:
            state.grad_seen.add(name)
        call_guarded("the backward hook of a wrapped module", state.backward_hook, name, param)

    return hook


def _make_output_hook(module: torch.nn.Module, state: ModuleState):
    """A model sharded with FSDP2: its parameters' gradients are the reduce-scattered shards FSDP2 sets at
    the end of backward, not accumulated by autograd, so no per-parameter hook sees them. This forward hook
    hooks the outputs instead: when backward reaches them, the end-of-backward callback is queued, after
    FSDP2's own (its hooks on the same outputs were registered first), so it finds the final shards."""

    def queue(grad: torch.Tensor) -> None:
        if not state.post_backward_queued and state.sync_enabled:
            state.post_backward_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(lambda: _post_backward(module, state))

    def hook(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if not module.training or not torch.is_grad_enabled():
            return
        for tensor in torch.utils._pytree.tree_leaves(output):
            if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                tensor.register_hook(queue)

    return hook


def _post_backward(module: torch.nn.Module, state: ModuleState) -> None:
    state.post_backward_queued = False
    state.scheduler.in_backward = False
    call_guarded("the end of backward of a wrapped module", _end_of_backward, module, state)


def _end_of_backward(module: torch.nn.Module, state: ModuleState) -> None:
    state.post_backward_hook()
    if state.find_unused_parameters and agree_on_used_parameters(module, state):
        rebuild_buckets(module, state)
    if module.bagua_capabilities.communicates_after_optimizer_step and \
            module.bagua_algorithm.communicates_after_optimizer_step(module):
        agree_on_nonfinite_gradients(module)  # every rank's GradScaler then skips the same steps


def _post_step(state: ModuleState, optimizer: torch.optim.Optimizer) -> None:
    call_guarded("the optimizer step hook of a wrapped module", state.post_step_hook, optimizer)


def install(module: torch.nn.Module, state: ModuleState) -> None:
    """Steps 2-8: build buckets, register every hook, keep the handles in ``state`` for :func:`uninstall`."""
    rebuild_buckets(module, state)
    # a model sharded with FSDP2: bagua's pre-forward runs before FSDP2's all-gather (the weights an algorithm
    # changes there, or rebuilds its buckets on, are the shards, not the gathered parameters of this forward)
    handles = [module.register_forward_pre_hook(_make_forward_pre_hook(state), prepend=state.shard is not None)]
    if state.shard is not None:  # FSDP2 sets the gradients' shards: the end of backward is found from the outputs
        handles.append(module.register_forward_hook(_make_output_hook(module, state)))
    else:
        for name, param in module.bagua_named_parameters():
            handles.append(param.register_post_accumulate_grad_hook(_make_backward_hook(module, state, name)))
    for optimizer in module.bagua_optimizers:
        handles.append(
            optimizer.register_step_post_hook(lambda opt, args, kwargs: _post_step(state, opt))
        )
    state.hooks = handles


def uninstall(module: torch.nn.Module, state: ModuleState) -> None:
    """Remove every hook, wait for pending communication, let the impl release what it holds, and drop
    the module's state (the module is plain again)."""
    for handle in state.hooks:
        handle.remove()
    state.hooks = []
    scheduler = state.scheduler
    if scheduler is not None:
        if failure_state.failure is None:  # after a failure, what is pending never completes
            scheduler.synchronize()
        scheduler.detach()
    state.scheduler = None
    try:
        module.bagua_algorithm.shutdown(module)
    finally:
        clear_state(module)
