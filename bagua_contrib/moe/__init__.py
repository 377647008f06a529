"""Mixture of experts with experts sharded over ranks (alltoall dispatch, top-1/top-2 gating), and the feature
``moe``: the expert parameters left alone by the wrap (:mod:`.feature`, as :func:`ignore_moe_params` by hand).

Example::

    >>> model = Net(moe=MoE(hidden_size=16, expert=expert, num_local_experts=2))
    >>> model = model.with_bagua([optimizer], "gradient_allreduce", features={"moe": {}})
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_contrib.moe.experts import Experts
from bagua_contrib.moe.feature import MoEConfig, MoEFeature
from bagua_contrib.moe.layer import MoE
from bagua_contrib.moe.sharded_moe import MOELayer, TopKGate
from bagua_contrib.moe.utils import ignore_moe_params, is_moe_param, moe_param_names

__all__ = ["Experts", "MOELayer", "MoE", "MoEConfig", "MoEFeature", "TopKGate", "bagua_register_features",
           "ignore_moe_params", "is_moe_param", "moe_param_names"]


@hookimpl
def bagua_register_features() -> list[type]:
    """The feature ``moe`` (:mod:`.feature`)."""
    return [MoEFeature]
