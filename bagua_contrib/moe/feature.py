"""The feature ``moe``: a model with mixture-of-experts layers (:class:`~bagua_contrib.moe.MoE`) wrapped so
that its expert parameters, which live on one rank each, are left alone: neither broadcast from rank 0 nor
averaged by the algorithm, exactly what :func:`~bagua_contrib.moe.ignore_moe_params` by hand before the wrap
does (it lists them in the module's ``_bagua_params_and_buffers_to_ignore``). The ranks first agree, before
the first collective, on the layers and their experts (their names and expert counts). A model without any
``MoE`` layer is wrapped as it is, with a warning (logger ``bagua.contrib``).

Example::

    >>> model = Net(moe=MoE(hidden_size=16, expert=expert, num_local_experts=2))
    >>> model = model.with_bagua([optimizer], "gradient_allreduce", features={"moe": {}})
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch

from bagua_core.api import Feature, FeatureConfig
from bagua_contrib.moe.layer import MoE
from bagua_contrib.moe.utils import ignore_moe_params

__all__ = ["MoEConfig", "MoEFeature", "moe_layers"]

logger = logging.getLogger("bagua.contrib")


def moe_layers(module: torch.nn.Module) -> list[tuple[str, MoE]]:
    """``(name, layer)`` of every mixture-of-experts layer in ``module``, in registration order."""
    return [(name, layer) for name, layer in module.named_modules() if isinstance(layer, MoE)]


class MoEConfig(FeatureConfig):
    name: Literal["moe"] = "moe"
    """The feature's name."""


class MoEFeature(Feature):
    """The experts of the MoE layers left alone by the wrap, as ``ignore_moe_params``: neither broadcast nor
    averaged, each rank's own (module doc)."""

    name = "moe"
    Config = MoEConfig

    def check(self, module: torch.nn.Module, algorithm: Any) -> None:
        if not moe_layers(module):
            logger.warning("feature 'moe': %s has no mixture-of-experts layer (bagua_contrib.moe.MoE); it is "
                           "wrapped as it is", type(module).__name__)

    def agreed_fields(self, module: torch.nn.Module) -> Mapping[str, Any]:
        return {"mixture-of-experts layers (name, experts)": [(name, layer.num_experts)
                                                               for name, layer in moe_layers(module)]}

    def setup(self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        ignore_moe_params(module)
