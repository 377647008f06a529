"""Decentralized data parallel (the decent-dp design): per-bucket optimizers fused into backward, each
bucket's parameters mixed with the peers of the step's topology edge while the next iteration runs.

Two call forms over one implementation, both on the core's lifecycle
(:class:`~.algorithm.DecentralizedDPAlgorithmImpl`: the core's buckets hold the parameters, its bucket
ready hook steps each bucket's optimizer inside backward; :class:`~.engine.DecentralizedEngine` holds
the topology, the per-bucket optimizers and the rounds in flight):

- the wrapper :class:`DecentralizedDataParallel` (``optim_fn`` / ``lr_scheduler_fn`` build each
  bucket's optimizer and scheduler; ``global_avg()`` averages exactly for evaluation);
- the ``decentralized_dp`` algorithm for ``with_bagua``: the user's loop stays
  ``zero_grad / backward / step``.

Topologies are plugins (hook ``bagua_register_topologies``, specified by this package in
:mod:`~.hookspecs`; base :class:`Topology`; the built-in ones in :mod:`~.topologies`, a plugin of their own).

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl), :mod:`.engine` (the
rounds, the per-bucket optimizers), :mod:`.buckets`, :mod:`.topology`, :mod:`.optimizers`,
:mod:`.optim_fns`, :mod:`.wrapper` (``DecentralizedDataParallel``).

Example::

    >>> from bagua_algorithms.decentralized_dp import DecentralizedDataParallel, optim_fn_for
    >>> model = DecentralizedDataParallel(net, optim_fn_for(torch.optim.AdamW, lr=1e-3, weight_decay=0.05),
    ...                                   topology="one-peer-exp")
"""

from __future__ import annotations

from bagua_algorithms.decentralized_dp import hookspecs
from bagua_algorithms.decentralized_dp.algorithm import DecentralizedDPAlgorithm, DecentralizedDPAlgorithmImpl
from bagua_algorithms.decentralized_dp.config import DecentralizedDPConfig
from bagua_algorithms.decentralized_dp.engine import DecentralizedEngine
from bagua_algorithms.decentralized_dp.optim_fns import optim_fn_for, optim_fn_like, weight_decay_groups
from bagua_algorithms.decentralized_dp.optimizers import AccumAdam, AccumAdamW, DecentralizedOptimizer
from bagua_algorithms.decentralized_dp.topology import (
    Edge,
    Topology,
    get_topology,
    mix_inplace,
    topology_names,
)
from bagua_algorithms.decentralized_dp.wrapper import DecentralizedDataParallel
from bagua_core.api import Algorithm, hookimpl

__all__ = [
    "AccumAdam",
    "AccumAdamW",
    "DecentralizedDPAlgorithm",
    "DecentralizedDPAlgorithmImpl",
    "DecentralizedDPConfig",
    "DecentralizedDataParallel",
    "DecentralizedEngine",
    "DecentralizedOptimizer",
    "Edge",
    "Topology",
    "get_topology",
    "mix_inplace",
    "optim_fn_for",
    "optim_fn_like",
    "topology_names",
    "weight_decay_groups",
]


@hookimpl
def bagua_add_hookspecs(plugin_manager) -> None:
    plugin_manager.add_hookspecs(hookspecs)  # the topology spec; the topologies plugin adds it too


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [DecentralizedDPAlgorithm]
