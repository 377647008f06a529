"""Load-balancing samplers, and the feature ``load_balancing_sampler``: every rank gets samples (or batches)
of similar cost at each step.

``samplers`` (``LoadBalancingDistributedSampler``, ``LoadBalancingDistributedBatchSampler``), ``complexity``
(the cost of a sample by name) and ``feature`` (the sampler of ``model.bagua_data_loader``).

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce", features={
    ...     "load_balancing_sampler": {"complexity": "len", "random_level": 0.1}})
    >>> loader = model.bagua_data_loader(sentences, batch_size=16, seed=0)
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_contrib.load_balancing_sampler.complexity import complexity_function
from bagua_contrib.load_balancing_sampler.feature import (
    LoadBalancingSamplerConfig,
    LoadBalancingSamplerFeature,
)
from bagua_contrib.load_balancing_sampler.samplers import (
    LoadBalancingDistributedBatchSampler,
    LoadBalancingDistributedSampler,
)

__all__ = ["LoadBalancingDistributedBatchSampler", "LoadBalancingDistributedSampler",
           "LoadBalancingSamplerConfig", "LoadBalancingSamplerFeature", "bagua_register_features",
           "complexity_function"]


@hookimpl
def bagua_register_features() -> list[type]:
    """The feature ``load_balancing_sampler`` (:mod:`.feature`)."""
    return [LoadBalancingSamplerFeature]
