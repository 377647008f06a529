"""Installs the lifecycle hooks of a wrapped module (forward pre-hook, per-parameter backward hooks,
end-of-backward callback, optimizer post-step hook) and rebuilds its buckets."""

from __future__ import annotations

from typing import Any

import torch

from bagua_core.runtime import env
from bagua_core.lifecycle.algorithm import group_tensors
from bagua_core.lifecycle.state import tensor_state_of
from bagua_core.selection.autotune import on_train_step as _autotune_on_train_step
from bagua_core.runtime.failure import call_guarded
from bagua_core.runtime.failure.record import state as failure_state
from bagua_core.module.nonfinite import agree_on_nonfinite_gradients
from bagua_core.lifecycle.scheduler import BucketScheduler
from bagua_core.module.unused_params import agree_on_used_parameters

__all__ = ["install", "uninstall", "rebuild_buckets"]


def rebuild_buckets(module: torch.nn.Module) -> None:
    """Steps 2-4 of the lifecycle: init_tensors, tensors_to_buckets, init_operations."""
    impl = module.bagua_algorithm
    old = getattr(module, "_bagua_scheduler", None)
    if old is not None:
        old.synchronize()
        old.detach()
        for bucket in getattr(module, "bagua_buckets", ()):
            for tensor in bucket.tensors:  # a parameter left out of the new buckets is in none
                tensor_state_of(tensor).bucket = None
    tensors = impl.init_tensors(module)
    bucket_size = impl.bucket_size_bytes() if hasattr(impl, "bucket_size_bytes") else env.get_default_bucket_size()
    buckets = impl.tensors_to_buckets(group_tensors(tensors, bucket_size), module._bagua_do_flatten)
    for bucket in buckets:
        bucket.process_group = module.process_group
        impl.init_operations(module, bucket)
    module.bagua_buckets = buckets
    ready_hook = impl.init_bucket_ready_hook(module) if hasattr(impl, "init_bucket_ready_hook") else None
    module._bagua_bucket_ready_hook = ready_hook
    module._bagua_scheduler = BucketScheduler(buckets, module.process_group.worker, ready_hook)
    module._bagua_backward_hook = impl.init_backward_hook(module)
    module._bagua_post_backward_hook = impl.init_post_backward_hook(module)
    module._bagua_forward_pre_hook = impl.init_forward_pre_hook(module)
    module._bagua_post_step_hook = impl.init_post_optimizer_step_hook(module)


def _forward_pre_hook(module: torch.nn.Module, inputs: Any) -> None:
    if not module.training:
        return
    call_guarded("the forward pre-hook of a wrapped module", _before_forward, module, inputs)


def _before_forward(module: torch.nn.Module, inputs: Any) -> None:
    module.bagua_train_step_counter += 1
    _autotune_on_train_step(module)  # off unless BAGUA_AUTOTUNE=1 / autotune.configure(module)
    if module.bagua_algorithm.need_reset():
        rebuild_buckets(module)
    if torch.is_grad_enabled():  # a forward that backward may follow (not an evaluation under no_grad)
        for bucket in module.bagua_buckets:
            bucket.bind_unset_views()
    module._bagua_forward_pre_hook(inputs)


def _make_backward_hook(module: torch.nn.Module, name: str):
    def hook(param: torch.Tensor) -> None:
        if not module.training or not module._bagua_sync_enabled:
            return
        if not module._bagua_post_backward_queued:
            module._bagua_post_backward_queued = True
            module._bagua_scheduler.in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(lambda: _post_backward(module))
        if module._bagua_find_unused_parameters:
            module._bagua_grad_seen.add(name)
        call_guarded("the backward hook of a wrapped module", module._bagua_backward_hook, name, param)

    return hook


def _post_backward(module: torch.nn.Module) -> None:
    module._bagua_post_backward_queued = False
    module._bagua_scheduler.in_backward = False
    call_guarded("the end of backward of a wrapped module", _end_of_backward, module)


def _end_of_backward(module: torch.nn.Module) -> None:
    module._bagua_post_backward_hook()
    if module._bagua_find_unused_parameters and agree_on_used_parameters(module):
        rebuild_buckets(module)
    if module.bagua_capabilities.communicates_after_optimizer_step and \
            module.bagua_algorithm.communicates_after_optimizer_step(module):
        agree_on_nonfinite_gradients(module)  # every rank's GradScaler then skips the same steps


def _post_step(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    call_guarded("the optimizer step hook of a wrapped module", module._bagua_post_step_hook, optimizer)


def install(module: torch.nn.Module) -> None:
    """Steps 2-8: build buckets, register every hook, remember the handles for :func:`uninstall`."""
    module._bagua_post_backward_queued = False
    module._bagua_find_unused_parameters = getattr(module, "_bagua_find_unused_parameters", False)
    module._bagua_grad_seen = set()
    module._bagua_params_in_use = None
    rebuild_buckets(module)
    handles = [module.register_forward_pre_hook(_forward_pre_hook)]
    for name, param in module.bagua_named_parameters():
        handles.append(param.register_post_accumulate_grad_hook(_make_backward_hook(module, name)))
    for optimizer in module.bagua_optimizers:
        handles.append(
            optimizer.register_step_post_hook(lambda opt, args, kwargs: _post_step(module, opt))
        )
    module._bagua_hooks = handles


def uninstall(module: torch.nn.Module) -> None:
    """Remove every hook, wait for pending communication and let the impl release what it holds."""
    for handle in getattr(module, "_bagua_hooks", None) or ():
        handle.remove()
    module._bagua_hooks = None
    scheduler = getattr(module, "_bagua_scheduler", None)
    if scheduler is not None:
        if failure_state.failure is None:  # after a failure, what is pending never completes
            scheduler.synchronize()
        scheduler.detach()
    module._bagua_scheduler = None
    module.bagua_algorithm.shutdown(module)
