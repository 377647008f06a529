"""One decision on every rank about an overflow, for algorithms that communicate after the optimizer step.

``torch.amp.GradScaler`` skips ``optimizer.step()`` when this rank's gradients hold inf/NaN. With
gradient allreduce the inf reaches every rank, so every rank skips. An algorithm that communicates
*after* the step from the weights (low-precision decentralized, local SGD) does not carry the
gradients, so one rank would skip its step, and with it its post-step hook and collectives, while the
others communicate: a hang or a shifted sequence of collectives. For such algorithms
(``AlgorithmImpl.communicates_after_optimizer_step``), the end of backward runs
:func:`agree_on_nonfinite_gradients`: a one-element MAX allreduce of "my gradients are not finite"
(on the communication thread, after the pending bucket operations), and where any rank's are not,
every rank puts a NaN in its gradients, so every rank's scaler skips the same step and lowers its
scale the same way (without a scaler the NaN reaches the weights of every rank, as with an allreduce).

Example::

    >>> agree_on_nonfinite_gradients(model)     # True: some rank overflowed; every rank's grads hold NaN
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from bagua_core.lifecycle.module_state import named_parameters, state_of
from bagua_core.lifecycle.tensor import local_shard
from bagua_core.runtime.communication import ReduceOp, allreduce_inplace

__all__ = ["agree_on_nonfinite_gradients", "has_nonfinite"]


def has_nonfinite(tensors: list[torch.Tensor]) -> bool:
    """Whether any of ``tensors`` holds inf or NaN (one fused pass per device and dtype).

    Each floating-point group's inf-norm (``max |x|``, torch's public multi-tensor ``_foreach_norm``, what
    ``clip_grad_norm_`` runs) is finite exactly when its elements are: a max cannot overflow on finite values
    (``finfo.max`` stays finite, unlike a 2-norm), and an inf or a NaN anywhere reaches it (the CPU path and
    the CUDA kernel both take the max NaN-propagating). Integer and complex tensors are skipped, and so are
    empty ones (an inf-norm of nothing is undefined)."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for tensor in tensors:
        if tensor.is_floating_point() and tensor.numel():
            groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    with torch.no_grad():
        for members in groups.values():
            norms = torch._foreach_norm(members, ord=float("inf"))
            if not torch.isfinite(torch.stack(norms)).all():
                return True
    return False


def agree_on_nonfinite_gradients(module: torch.nn.Module) -> bool:
    """Every rank learns whether any rank's gradients of ``module`` hold inf/NaN; if so, a NaN is put
    into the gradients of every rank that had none. Collective (on the group's communication thread).

    A model sharded with FSDP2: each rank checks and marks its local gradient shards (a NaN written
    through the ``DTensor`` would be a collective of its own), and the verdict of the algorithm's group
    (the ranks holding the same shard) is then agreed over the shard group too, so the ranks of one node,
    whose next backward FSDP2 reduce-scatters together, skip the same steps with the same loss scale."""
    params = [p for _, p in named_parameters(module)]
    grads = [local_shard(p.grad) for p in params if p.grad is not None]
    mine = has_nonfinite(grads)
    flag = torch.tensor([1 if mine else 0], dtype=torch.int32)
    group = state_of(module).process_group
    comm, worker = group.get_global_communicator(), group.worker
    worker.submit(allreduce_inplace, flag, ReduceOp.MAX, comm)
    worker.synchronize()
    layout = state_of(module).shard
    if layout is not None and layout.count > 1:
        flag = flag.to(params[0].device)  # the shard group's backend is FSDP2's (NCCL on CUDA)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=layout.shard_group)
    anywhere = bool(flag.item())
    if anywhere and not mine:
        with torch.no_grad():
            for grad in grads:
                if grad.numel():
                    grad.view(-1)[0] = float("nan")
    return anywhere

