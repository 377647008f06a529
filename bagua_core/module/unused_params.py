"""``find_unused_parameters=True``: parameters that receive no gradient leave the buckets.

After every backward the ranks agree (one allreduce MAX of a 0/1 mask over the parameters, in
registration order) on which parameters received a gradient on some rank. When that set differs from
the one the buckets were built for, ``bagua_build_params()`` returns the new set and the hooks rebuild
the buckets. Parameters that became used again were not in this step's buckets: their gradients are
communicated at once through buckets of their own (built by the algorithm as any other), so no rank
steps with a gradient the others did not average. A parameter used on some ranks only gets a zero
gradient on the others (as in torch DDP).

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce")
    >>> state_of(model).find_unused_parameters = True    # what data_parallel.DistributedDataParallel sets
"""

from __future__ import annotations

import torch

from bagua_core.lifecycle.algorithm import group_tensors
from bagua_core.lifecycle.module_state import ModuleState
from bagua_core.runtime.communication import ReduceOp, allreduce_inplace
from bagua_core.lifecycle.scheduler import BucketScheduler

__all__ = ["agree_on_used_parameters"]


def _used_on_any_rank(module: torch.nn.Module, state: ModuleState) -> set[str]:
    names = [name for name, _ in module.bagua_named_parameters()]
    seen, state.grad_seen = state.grad_seen, set()
    mask = torch.tensor([1 if name in seen else 0 for name in names], dtype=torch.int32)
    allreduce_inplace(mask, op=ReduceOp.MAX, comm=module.process_group.get_global_communicator())
    return {name for name, used in zip(names, mask.tolist()) if used}


def _communicate_now(module: torch.nn.Module, state: ModuleState, names: set[str]) -> None:
    """Run the algorithm's bucket operations once over the gradients of ``names`` only."""
    impl = module.bagua_algorithm
    state.params_in_use = names
    tensors = impl.init_tensors(module)
    buckets = impl.tensors_to_buckets(group_tensors(tensors, impl.bucket_size_bytes()), state.do_flatten)
    for bucket in buckets:
        bucket.process_group = module.process_group
        impl.init_operations(module, bucket)
    scheduler = BucketScheduler(buckets, module.process_group.worker)
    try:
        scheduler.wait()  # marks every tensor ready, launches in order, waits
    finally:
        scheduler.detach()


def agree_on_used_parameters(module: torch.nn.Module, state: ModuleState) -> bool:
    """At the end of backward (every rank): whether the used parameters changed, in which case the
    caller (``bagua_core.module.hooks``, which installed this step) rebuilds the buckets."""
    used = _used_on_any_rank(module, state)
    in_use = state.params_in_use
    if in_use is None:
        in_use = {name for name, _ in module.bagua_named_parameters()}
    if used == in_use:
        return False
    newly_used = used - in_use
    if newly_used:
        _communicate_now(module, state, newly_used)
    state.params_in_use = used
    return True
