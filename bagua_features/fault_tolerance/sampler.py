"""Which samples a replica reads in fault-tolerant mode: the shard follows the step's quorum.

An epoch is one seeded permutation of the data set, read in order by committed steps: a step with ``n``
ranks in its quorum (replicas times ranks per replica) reads the next ``n * batch_size`` samples, rank
``r`` of the quorum the ``r``-th slice. The position and the epoch live in the runtime: they advance only
when a step commits and are healed into a joiner, so a discarded step's samples are read again by the
next quorum (a failed replica's share of the epoch is taken over by the survivors), every sample is read
once per epoch by a committed step whatever the membership does, and a joiner continues the quorum's
epoch, not its own.

Example::

    >>> sampler = QuorumSampler(len(dataset), batch_size=32, seed=0)
    >>> while sampler.epoch < epochs:
    ...     indices = sampler.next_indices(model)      # joins the step's quorum first
    ...     if indices is None:                         # the epoch is used up; sampler.epoch moved on
    ...         continue
    ...     x, y = dataset[indices]; ...; optimizer.step()
"""

from __future__ import annotations

from typing import Any

import torch

from bagua_features.fault_tolerance.current import current_runtime

__all__ = ["QuorumSampler"]


def _runtime() -> Any:
    runtime = current_runtime()
    if runtime is None:
        raise RuntimeError("QuorumSampler needs fault-tolerant mode (init_process_group(fault_tolerant=True) or "
                           "bagua run --fault-tolerant)")
    return runtime


class QuorumSampler:
    """The indices of each step's batch for this rank, from the quorum (module doc)."""

    def __init__(self, dataset_size: int, batch_size: int, seed: int = 0, shuffle: bool = True) -> None:
        if batch_size < 1 or dataset_size < 1:
            raise ValueError(f"QuorumSampler needs dataset_size and batch_size >= 1, got {dataset_size}, {batch_size}")
        self.dataset_size, self.batch_size, self.seed, self.shuffle = dataset_size, batch_size, seed, shuffle
        self._orders: dict[int, torch.Tensor] = {}

    @property
    def epoch(self) -> int:
        """The quorum's epoch (healed into a joiner)."""
        return _runtime().data_epoch

    def order(self, epoch: int) -> torch.Tensor:
        """The permutation of ``epoch`` (the same on every replica)."""
        if epoch not in self._orders:
            if self.shuffle:
                self._orders = {epoch: torch.randperm(self.dataset_size,
                                                      generator=torch.Generator().manual_seed(self.seed + epoch))}
            else:
                self._orders = {epoch: torch.arange(self.dataset_size)}
        return self._orders[epoch]

    def next_indices(self, module: torch.nn.Module) -> torch.Tensor | None:
        """This rank's indices for the next step of the wrapped ``module`` (joining the step's quorum first),
        or None when the quorum's epoch is used up (every replica of the quorum then moves to the next)."""
        runtime = _runtime()
        start, rank, size = runtime.shard(self.batch_size)
        if start + size * self.batch_size > self.dataset_size:
            runtime.data_epoch, runtime.data_position = runtime.data_epoch + 1, 0
            runtime.end_without_step()
            return None
        begin = start + rank * self.batch_size
        return self.order(runtime.data_epoch)[begin:begin + self.batch_size]
