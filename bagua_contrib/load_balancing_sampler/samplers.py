"""Samplers that give every rank samples (or batches) of similar cost at each step.

Samples are ordered by ``complexity_fn(sample)`` (with random noise of ``random_level`` times the
complexity range when shuffling), cut into chunks of ``num_replicas`` consecutive samples (chunk ``k`` rotated by ``k``), and rank
``r`` takes the ``r``-th sample of every chunk; the order of the chunks is shuffled by epoch. So at each
step the ranks work on samples of nearly equal complexity and nobody waits for a straggler.
Nothing is communicated: every rank computes the same permutation from ``seed + epoch``.

Example::

    >>> sampler = LoadBalancingDistributedSampler(dataset, complexity_fn=lambda s: len(s[0]))
    >>> loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=8)
    >>> for epoch in range(3):
    ...     sampler.set_epoch(epoch)
    ...     for batch in loader: ...
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch.utils.data import Dataset, Sampler

__all__ = ["LoadBalancingDistributedBatchSampler", "LoadBalancingDistributedSampler"]


def _default_replicas_and_rank(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    if num_replicas is None or rank is None:
        import bagua_core

        if not bagua_core.is_initialized():
            raise RuntimeError("pass num_replicas and rank, or call bagua_core.init_process_group() first")
        num_replicas = bagua_core.get_world_size() if num_replicas is None else num_replicas
        rank = bagua_core.get_rank() if rank is None else rank
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise ValueError(f"rank must be in [0, {num_replicas - 1}], got {rank}")
    return num_replicas, rank


class LoadBalancingDistributedSampler(Sampler[int]):
    """Distributed sampler balancing ``complexity_fn`` over ranks (see the module docstring).

    Like ``DistributedSampler``: ``num_samples`` indices per rank; without ``drop_last`` the list is
    padded by wrapping around (a few samples repeat), with it the most complex surplus is dropped.
    ``random_level`` in [0, 1]: how far the complexity order is blurred before chunking when shuffling.
    """

    def __init__(self, dataset: Dataset, complexity_fn: Callable[[object], float], num_replicas: int | None = None,
                 rank: int | None = None, shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 random_level: float = 0) -> None:
        self.num_replicas, self.rank = _default_replicas_and_rank(num_replicas, rank)
        if not 0.0 <= random_level <= 1.0:
            raise ValueError(f"random_level must be in [0, 1], got {random_level}")
        self.dataset, self.shuffle, self.seed, self.drop_last = dataset, shuffle, seed, drop_last
        self.random_level = random_level
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % self.num_replicas:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.complexities = torch.tensor([float(complexity_fn(dataset[i])) for i in range(n)], dtype=torch.float64)
        spread = float(self.complexities.max() - self.complexities.min()) if n else 0.0
        self.noise_scale = spread * random_level

    def shuffle_chunks(self) -> tuple[list[list[int]], list[int]]:
        """The chunks (``num_replicas`` indices of similar complexity each) and their order this epoch."""
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        complexities = self.complexities
        if self.shuffle and self.noise_scale > 0:
            complexities = complexities + torch.rand(len(complexities), generator=generator,
                                                     dtype=torch.float64) * self.noise_scale
        # ties broken by a random permutation when shuffling, so equal-cost samples move between ranks
        order = torch.randperm(len(complexities), generator=generator) if self.shuffle else torch.arange(
            len(complexities))
        ranked = order[torch.sort(complexities[order], stable=True).indices].tolist()
        if self.drop_last:
            ranked = ranked[:self.total_size]
        else:
            ranked = [ranked[i % len(ranked)] for i in range(self.total_size)]
        chunks = [ranked[i:i + self.num_replicas] for i in range(0, self.total_size, self.num_replicas)]
        # rotate chunk k by k: no rank always takes the cheapest (or dearest) sample of its chunk
        chunks = [chunk[k % len(chunk):] + chunk[:k % len(chunk)] for k, chunk in enumerate(chunks)]
        chunk_order = torch.randperm(len(chunks), generator=generator).tolist() if self.shuffle else list(
            range(len(chunks)))
        return chunks, chunk_order

    def __iter__(self) -> Iterator[int]:
        chunks, chunk_order = self.shuffle_chunks()
        return iter([chunks[i][self.rank] for i in chunk_order])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use a new shuffle for ``epoch`` (call before each epoch, with the same value on every rank)."""
        self.epoch = epoch


class LoadBalancingDistributedBatchSampler(Sampler[list[int]]):
    """Groups the indices of ``sampler`` into batches with ``batch_fn(indices) -> list of batches``
    (e.g. by a token budget). Every rank gets the same number of batches, so collectives stay matched:
    the longest list (others padded by repeating their first batches), or with ``drop_last`` the
    shortest (others truncated)."""

    def __init__(self, sampler: LoadBalancingDistributedSampler, batch_fn: Callable[[list[int]], list[list[int]]],
                 drop_last: bool = False) -> None:
        if not isinstance(sampler, LoadBalancingDistributedSampler):
            raise TypeError(f"sampler must be a LoadBalancingDistributedSampler, got {type(sampler).__name__}")
        self.sampler, self.batch_fn, self.drop_last = sampler, batch_fn, drop_last
        self.num_replicas, self.rank = sampler.num_replicas, sampler.rank
        self.generate_batches()

    def generate_batches(self) -> None:
        chunks, chunk_order = self.sampler.shuffle_chunks()
        batches = [self.batch_fn([chunks[i][rank] for i in chunk_order]) for rank in range(self.num_replicas)]
        lengths = [len(b) for b in batches]
        self.total_batch = min(lengths) if self.drop_last else max(lengths)
        mine = batches[self.rank]
        if not mine and self.total_batch:
            raise ValueError(f"batch_fn returned no batch for rank {self.rank}")
        self.padded_batches = [mine[i % len(mine)] for i in range(self.total_batch)] if mine else []

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.padded_batches)

    def __len__(self) -> int:
        return self.total_batch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)
        self.generate_batches()
