"""What ``with_bagua`` does before any algorithm runs: agree across ranks, then broadcast from rank 0.

Every rank prepares locally (resolves the algorithm, reads its environment, describes its model), then
one ``all_gather_object`` (:func:`bagua_core.runtime.agreement.agree_or_raise`) tells each rank whether the
others succeeded and whether they decided the same. A failure or a difference anywhere is raised on
every rank, so bad input never leaves the other ranks waiting in a collective.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from bagua_core.runtime.agreement import agree_or_raise, model_signature
from bagua_core.runtime.communication import broadcast
from bagua_core.runtime.communication.communicator import BaguaCommunicator

__all__ = ["agree_or_raise", "broadcast_tensors", "broadcast_optimizer_state", "broadcast_sharded_optimizer_state",
           "model_signature"]

_BROADCAST_CHUNK_BYTES = 64 * 1024 * 1024


def broadcast_tensors(tensors: Sequence[torch.Tensor], src: int, comm: BaguaCommunicator) -> None:
    """Broadcast tensors from ``src`` in place, coalesced by dtype/device into chunks of <= 64 MiB."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    for members in groups.values():
        chunk: list[torch.Tensor] = []
        size = 0
        for tensor in members + [None]:  # type: ignore[list-item]
            if tensor is not None:
                chunk.append(tensor)
                size += tensor.numel() * tensor.element_size()
            if chunk and (tensor is None or size >= _BROADCAST_CHUNK_BYTES):
                with torch.no_grad():
                    flat = torch.cat([t.data.reshape(-1) for t in chunk])
                    broadcast(flat, src=src, comm=comm)
                    for target, value in zip(chunk, flat.split([t.numel() for t in chunk])):
                        target.data.copy_(value.view_as(target.data))
                chunk, size = [], 0


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, src: int, comm: BaguaCommunicator) -> None:
    """Make every rank's optimizer state (moments, step counts, hyper-parameters) equal to ``src``'s."""
    payload = [optimizer.state_dict() if comm.rank() == src else None]
    dist.broadcast_object_list(payload, group=comm.torch_group, group_src=comm.group_rank(src))
    if comm.rank() != src:
        optimizer.load_state_dict(payload[0])


def broadcast_sharded_optimizer_state(optimizer: torch.optim.Optimizer, src: int, comm: BaguaCommunicator) -> None:
    """For a model sharded with FSDP2: every tensor of the optimizer's state (a ``DTensor``'s local shard)
    from ``src`` of ``comm``, the ranks holding the same shards. The rest of the state (step counts,
    hyper-parameters) is the same on every rank of a job that starts or resumes together."""
    tensors = []
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                tensors.append(value.to_local() if hasattr(value, "to_local") else value)
    if tensors:
        broadcast_tensors(tensors, src=src, comm=comm)
