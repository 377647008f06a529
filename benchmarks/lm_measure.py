"""What the LM benchmark measures on a model besides its loss: the job's averaged weights (what an
evaluation sees) and the bytes a rank holds.

Example::

    >>> with averaged_weights(model) as averaged:    # collective: every rank enters
    ...     loss = evaluate(model)                   # averaged: False where every rank held the same weights
    >>> held_bytes(model, optimizer)            # parameters + gradients + optimizer state of this rank
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.lm_model import LM_CONFIGS, build_lm, lm_loss

__all__ = ["averaged_weights", "held_bytes", "replicated_bytes"]


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


_rounds = itertools.count()


@contextlib.contextmanager
def averaged_weights(model: torch.nn.Module, group: Any = None, via: Path | None = None) -> Iterator[bool]:
    """Inside the block the model holds the average of the ranks' weights (what the job has trained;
    local weights differ between synchronisations for decentralized methods and DiLoCo); a checksum
    skips the averaging where every rank holds the same weights. The local weights come back after.
    It yields whether it averaged (False: the ranks' weights were equal, as right after a DiLoCo merge).
    A sharded model: each rank's shards, averaged over ``group`` (the ranks holding the same shard).

    ``via``: a folder every rank can read (the ranks are processes of one machine): the weights travel
    through files there and only two small collectives use the network, so an evaluation costs the same
    on every emulated link (an allreduce of the lm11m's 43 MB took minutes at 10 Mbit/s + 50 ms). Without
    it, one allreduce over ``group``."""
    params = [_local(p) for p in model.parameters()]
    size = dist.get_world_size(group)
    flat = torch.cat([p.detach().reshape(-1).double() for p in params])
    checksum = torch.stack([flat.sum(), (flat * torch.arange(flat.numel(), dtype=torch.float64) % 9973).sum()])
    everyone = [torch.empty_like(checksum) for _ in range(size)]
    dist.all_gather(everyone, checksum, group=group)
    if all(torch.equal(everyone[0], other) for other in everyone):
        yield False
        return
    saved = [p.detach().clone() for p in params]
    average = torch.cat([p.reshape(-1).float() for p in saved])
    if via is None:
        dist.all_reduce(average, group=group)
    else:
        average = _sum_through_files(average, group, Path(via))
    average /= size
    at = 0
    for p in params:
        p.copy_(average[at : at + p.numel()].view_as(p))
        at += p.numel()
    try:
        yield True
    finally:
        for p, value in zip(params, saved):
            p.copy_(value)


def _sum_through_files(mine: torch.Tensor, group: Any, folder: Path) -> torch.Tensor:
    """The sum over ``group`` of every rank's ``mine``, in the group's rank order, each rank's tensor
    written to ``folder`` and read by the others; two barriers over ``group`` order the writes, the reads
    and the removal."""
    round_ = next(_rounds)
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    path = folder / f"average-{round_}-{dist.get_rank()}.pt"
    torch.save(mine, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)
    dist.barrier(group=group)
    total = torch.zeros_like(mine)
    for rank in ranks:
        total += torch.load(folder / f"average-{round_}-{rank}.pt")
    dist.barrier(group=group)
    path.unlink()
    return total


def held_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of parameters, gradients and optimizer state this rank holds (its shards on a sharded model)."""
    tensors = [_local(p) for p in model.parameters()] + [_local(p.grad) for p in model.parameters()
                                                         if p.grad is not None]
    tensors += [_local(v) for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def replicated_bytes(name: str, make_optimizer: Callable[[Any], torch.optim.Optimizer]) -> int:
    """What one rank holds of the replicated model after a step, measured (a local step, no communication)."""
    model = build_lm(name, seed=0)
    optimizer = make_optimizer(model.parameters())
    x = torch.randint(0, 256, (1, LM_CONFIGS[name]["seq_len"] + 1))
    lm_loss(model, x[:, :-1], x[:, 1:]).backward()
    optimizer.step()
    return held_bytes(model, optimizer)
