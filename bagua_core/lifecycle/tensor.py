"""The tensors of a model sharded with FSDP2: whether a value is a ``DTensor``, its local shard, whether a module
is sharded, its sharded parameters registered again, an optimizer's state loaded from local shards. (The core's
tensor proxies are ``bagua_core.lifecycle.proxies``.)
"""

from __future__ import annotations

import sys
from typing import Any

import torch

__all__ = ["is_dtensor", "is_sharded", "local_shard", "load_optimizer_state", "register_shards"]


def is_dtensor(value: Any) -> bool:
    """Whether ``value`` is a ``DTensor`` (FSDP2's parameters, gradients and optimizer state). No tensor is one until
    ``torch.distributed.tensor`` was imported (``fully_shard`` imports it), so bagua does not import it itself: that
    import takes about 0.6 s, in every process of a job that shards nothing."""
    module = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(module, "DTensor", None)
    return dtensor is not None and isinstance(value, dtensor)


def local_shard(value: Any) -> Any:
    """``value`` as the tensor this rank holds: a ``DTensor`` (a parameter, gradient or optimizer state of a
    model sharded with FSDP2) as its local shard, any other value as it is.

    Example::

        >>> [local_shard(p).shape for p in sharded_model.parameters()]   # this rank's shards
    """
    if not is_dtensor(value):
        return value
    with torch.no_grad():  # DTensor's public accessor: the local tensor itself, not an autograd view of it
        return value.to_local()


def is_sharded(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a model sharded with FSDP2 (``DTensor`` parameters): the one check of it. For a
    wrapped module its state's layout says the same (``ModuleState.shard``).

    Example::

        >>> is_sharded(fully_shard(model, mesh=bagua.node_mesh()))
        True
    """
    return any(is_dtensor(p) for p in module.parameters())


def register_shards(module: torch.nn.Module) -> None:
    """Make every FSDP2 module inside ``module`` hold its sharded parameters (``FSDPModule.reshard()``: a no-op
    where they are). A forward without backward leaves the unsharded parameters registered where FSDP2 does not
    reshard after forward (its root, by default) until the next forward: bagua must not take those, whose
    storage FSDP2 frees, for the weights it keeps, copies or averages in the background.

    Example::

        >>> model(x_eval)                 # under no_grad: the root's parameters stay unsharded
        >>> register_shards(model)        # the sharded DTensor parameters again
    """
    if "torch.distributed.fsdp" not in sys.modules:  # nothing is fully_shard-ed: FSDP2 was never imported
        return
    from torch.distributed.fsdp import FSDPModule

    for sub in module.modules():
        if isinstance(sub, FSDPModule):
            sub.reshard()


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(state)`` where ``state``'s tensors may be local shards (a copy that crossed
    processes or was taken with :func:`local_shard`): a plain tensor with the local shard's shape of a
    ``DTensor`` parameter is wrapped as that parameter's ``DTensor`` (its mesh, placements, global shape)
    first, so the optimizer steps on ``DTensor`` tensors as before; scalars (step counts) stay plain.

    Example::

        >>> saved = optimizer.state_dict()
        >>> saved["state"] = {i: {k: local_shard(v) for k, v in s.items()} for i, s in saved["state"].items()}
        >>> load_optimizer_state(optimizer, saved)      # the optimizer's state is DTensors again
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    wrapped = {}
    for index, entries in state["state"].items():
        param = params[int(index)]
        if not is_dtensor(param):
            wrapped[index] = entries
            continue
        shape = param.to_local().shape
        wrapped[index] = {
            key: type(param).from_local(value, param.device_mesh, param.placements, run_check=False, shape=param.shape,
                                    stride=param.stride())
            if isinstance(value, torch.Tensor) and not is_dtensor(value) and value.dim() > 0
            and value.shape == shape else value
            for key, value in entries.items()}
    optimizer.load_state_dict({**state, "state": wrapped})
