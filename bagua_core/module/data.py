"""``model.bagua_data_loader(dataset, batch_size)``: the data a wrapped module trains on, shaped by its features.

Each feature the module runs may wrap the dataset (``Feature.dataset``: a cache) and one may give the sampler
(``Feature.sampler``: samples of similar cost on every rank); without one, torch's ``DistributedSampler`` over the
job's ranks. The loader is torch's ``DataLoader``: call ``loader.sampler.set_epoch(epoch)`` before each epoch.

Example::

    >>> loader = model.bagua_data_loader(dataset, batch_size=32, seed=0)   # features={"load_balancing_sampler": {}}
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from bagua_core.lifecycle.module_state import state_of
from bagua_core.runtime import env
from bagua_core.runtime.exceptions import BaguaConfigError, BaguaError

__all__ = ["data_loader"]


def data_loader(module: torch.nn.Module, dataset: Dataset, batch_size: int = 1, *, shuffle: bool = True,
                seed: int = 0, drop_last: bool = False, **loader_options: Any) -> DataLoader:
    """A ``DataLoader`` of ``dataset`` for this rank's share of every step (module doc): ``batch_size`` samples a
    step, shuffled by ``seed`` and the epoch when ``shuffle``, the last partial batch (and the samples that do not
    split evenly over the ranks) dropped with ``drop_last``; ``loader_options`` go to the ``DataLoader``
    (``num_workers``, ``collate_fn``, ...)."""
    state = state_of(module)
    if state is None:
        raise BaguaError(f"bagua_data_loader: {type(module).__name__} is not wrapped (call with_bagua first)")
    if "sampler" in loader_options or "batch_sampler" in loader_options:
        raise BaguaConfigError("bagua_data_loader chooses the sampler (a feature's, or DistributedSampler); build a "
                               "DataLoader yourself to give one")
    for feature in state.features:
        dataset = feature.dataset(module, dataset)
    shard = {"num_replicas": env.get_world_size(), "rank": env.get_rank(), "shuffle": shuffle, "seed": seed,
             "drop_last": drop_last}
    given = [(feature.name, sampler) for feature in state.features
             if (sampler := feature.sampler(module, dataset, **shard)) is not None]
    if len(given) > 1:
        raise BaguaConfigError(f"features {', '.join(name for name, _ in given)} each give the data loader's sampler; "
                               f"run one of them")
    sampler = given[0][1] if given else DistributedSampler(dataset, **shard)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **loader_options)
