"""The feature ``load_balancing_sampler``: the data loader a wrapped module trains on
(``model.bagua_data_loader(dataset, batch_size)``) draws its samples with a
:class:`LoadBalancingDistributedSampler` instead of torch's ``DistributedSampler``: at every step the ranks
work on samples of similar cost, so nobody waits for a straggler. It is what
``LoadBalancingDistributedSampler(dataset, complexity_fn, num_replicas, rank, shuffle, seed, drop_last,
random_level)`` given to a ``DataLoader`` by hand gives (the loader's ``shuffle``, ``seed`` and ``drop_last``,
the job's ranks). The cost of a sample is named in the options (``complexity``: :mod:`.complexity`), so a
config file can choose it; the function is found when the wrap checks its features, on every rank before the
first collective.

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce",
    ...                          features={"load_balancing_sampler": {"complexity": "len"}})
    >>> loader = model.bagua_data_loader(sentences, batch_size=16)
    >>> for epoch in range(3):
    ...     loader.sampler.set_epoch(epoch)
    ...     for batch in loader: ...
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, field_validator
from torch.utils.data import Dataset, Sampler

from bagua_core.api import Feature, FeatureConfig
from bagua_contrib.load_balancing_sampler.complexity import check_complexity_name, complexity_function
from bagua_contrib.load_balancing_sampler.samplers import LoadBalancingDistributedSampler

__all__ = ["LoadBalancingSamplerConfig", "LoadBalancingSamplerFeature"]


class LoadBalancingSamplerConfig(FeatureConfig):
    name: Literal["load_balancing_sampler"] = "load_balancing_sampler"
    """The feature's name."""
    complexity: str = "len"
    """The cost of a sample: ``len``, ``numel``, ``sum`` or ``module:function``
    (``bagua_contrib.load_balancing_sampler.complexity``)."""
    random_level: float = Field(0.0, ge=0.0, le=1.0)
    """How far the cost order is blurred before chunking when shuffling, in [0, 1] (0: not at all)."""

    @field_validator("complexity")
    @classmethod
    def _known(cls, value: str) -> str:
        return check_complexity_name(value)


class LoadBalancingSamplerFeature(Feature):
    """The sampler of ``model.bagua_data_loader``: every rank gets samples of similar cost at each step
    (module doc)."""

    name = "load_balancing_sampler"
    Config = LoadBalancingSamplerConfig

    def check(self, module: torch.nn.Module, algorithm: Any) -> None:
        complexity_function(self.config.complexity)  # one that cannot be imported: refused on every rank

    def sampler(self, module: torch.nn.Module, dataset: Dataset, *, num_replicas: int, rank: int,
                shuffle: bool, seed: int, drop_last: bool) -> Sampler:
        cost = complexity_function(self.config.complexity)
        return LoadBalancingDistributedSampler(dataset, cost, num_replicas, rank, shuffle, seed, drop_last,
                                               self.config.random_level)
