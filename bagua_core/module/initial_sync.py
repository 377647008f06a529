"""What ``with_bagua`` does before any algorithm runs: agree across ranks, then broadcast from rank 0.

Every rank prepares locally (resolves the algorithm, describes its model), then one ``all_gather_object``
tells each rank whether the others succeeded and whether the models match. A failure anywhere is
raised on every rank, so bad input never leaves the other ranks waiting in a collective.
"""

from __future__ import annotations

from typing import TypeVar
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from bagua_core.communication import broadcast
from bagua_core.communication.communicator import BaguaCommunicator
from bagua_core.exceptions import BaguaError, RankMismatchError

__all__ = ["agree_or_raise", "broadcast_tensors", "broadcast_optimizer_state", "model_signature"]

T = TypeVar("T")

_BROADCAST_CHUNK_BYTES = 64 * 1024 * 1024


def model_signature(named_tensors: Sequence[tuple[str, torch.Tensor]]) -> list[tuple[str, tuple, str]]:
    return [(name, tuple(t.shape), str(t.dtype)) for name, t in named_tensors]


def agree_or_raise(comm: BaguaCommunicator, prepare: Callable[[], T], signature: object) -> T:
    """Run ``prepare()`` on every rank; raise on every rank if it failed anywhere or the signatures
    differ. On the rank that failed, the original exception is raised."""
    error: BaseException | None = None
    result = None
    try:
        result = prepare()
    except Exception as exc:  # reported to every rank below
        error = exc
    status = (None if error is None else f"{type(error).__name__}: {error}", signature)
    gathered: list = [None] * comm.nranks()
    dist.all_gather_object(gathered, status, group=comm.torch_group)
    if error is not None:
        raise error
    for rank, (message, _) in enumerate(gathered):
        if message is not None:
            raise BaguaError(f"with_bagua failed on rank {rank} of the group: {message}")
    for rank, (_, other) in enumerate(gathered):
        if other != signature:
            mine = signature if isinstance(signature, list) else [signature]
            theirs = other if isinstance(other, list) else [other]
            diff = next((f"{a} vs {b}" for a, b in zip(mine, theirs) if a != b), f"{len(mine)} vs {len(theirs)} entries")
            raise RankMismatchError(
                f"the model differs between rank {comm.rank()} and rank {rank}: {diff}; every rank must wrap the "
                "same model"
            )
    return result  # type: ignore[return-value]


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
                    flat = _flatten_dense_tensors([t.data for t in chunk])
                    broadcast(flat, src=src, comm=comm)
                    for target, value in zip(chunk, _unflatten_dense_tensors(flat, [t.data for t in chunk])):
                        target.data.copy_(value)
                chunk, size = [], 0


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, src: int, comm: BaguaCommunicator) -> None:
    """Make every rank's optimizer state (moments, step counts, hyper-parameters) equal to ``src``'s."""
    payload = [optimizer.state_dict() if comm.rank() == src else None]
    dist.broadcast_object_list(payload, src=comm.global_rank(src), group=comm.torch_group)
    if comm.rank() != src:
        optimizer.load_state_dict(payload[0])
