"""Which samples a replica reads in fault-tolerant mode: the shard follows the step's quorum.

An epoch is one seeded permutation of the data set, read in order by committed steps: a step with ``n``
replicas in its quorum reads the next ``n * batch_size`` samples, replica ``r`` the ``r``-th slice. The
position advances only when the step commits (and is healed into a joiner), so a discarded step's samples
are read again by the next quorum: a failed replica's share of the epoch is taken over by the survivors,
and every sample is read once per epoch by a committed step whatever the membership does.

Example::

    >>> sampler = QuorumSampler(len(dataset), batch_size=32, seed=0)
    >>> for epoch in range(epochs):
    ...     sampler.set_epoch(epoch)
    ...     while (indices := sampler.next_indices(model)) is not None:
    ...         x, y = dataset[indices]; ...; optimizer.step()
"""

from __future__ import annotations

import torch

__all__ = ["QuorumSampler"]


class QuorumSampler:
    """The indices of each step's batch for this replica, from the quorum (module doc)."""

    def __init__(self, dataset_size: int, batch_size: int, seed: int = 0, shuffle: bool = True) -> None:
        if batch_size < 1 or dataset_size < 1:
            raise ValueError(f"QuorumSampler needs dataset_size and batch_size >= 1, got {dataset_size}, {batch_size}")
        self.dataset_size, self.batch_size, self.seed, self.shuffle = dataset_size, batch_size, seed, shuffle
        self.epoch = 0
        self._order = self._permutation()

    def _permutation(self) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.dataset_size)
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.dataset_size, generator=generator)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` (the runtime's position is per epoch: it is reset by the first step of the epoch)."""
        self.epoch = epoch
        self._order = self._permutation()

    def next_indices(self, module: torch.nn.Module) -> torch.Tensor | None:
        """This replica's indices for the next step of the wrapped ``module`` (joining the step's quorum
        first), or None when the epoch is used up. Outside fault-tolerant mode: ``None`` is never returned
        before ``dataset_size // batch_size`` steps of this replica alone."""
        from bagua_core.fault_tolerance import current_runtime

        runtime = current_runtime()
        if runtime is None:
            raise RuntimeError("QuorumSampler.next_indices needs fault-tolerant mode (init_process_group("
                               "fault_tolerant=True) or bagua run --fault-tolerant)")
        if runtime.data_epoch != self.epoch:
            runtime.data_epoch, runtime.data_position = self.epoch, 0
        start, rank, size = runtime.shard(self.batch_size)
        if start + size * self.batch_size > self.dataset_size:
            runtime.end_without_step()  # nothing is trained in this quorum; the epoch is over
            return None
        begin = start + rank * self.batch_size
        return self._order[begin:begin + self.batch_size]
