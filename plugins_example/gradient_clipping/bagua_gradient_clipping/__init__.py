"""bagua-gradient-clipping: a third-party bagua feature. The gradients the optimizer steps with are clipped to a
total norm, between the algorithm's exchange and the optimizer step (:mod:`.feature`).

Select it by name, beside any algorithm whose optimizer steps after backward::

    model = model.with_bagua([optimizer], "gradient_allreduce", features={"gradient_clipping": {"max_norm": 1.0}})

or from a config file (``configs/gradient_clipping.toml``)::

    [algorithm]
    name = "bytegrad"
    hierarchical = false

    [features.gradient_clipping]
    max_norm = 1.0
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_gradient_clipping.config import GradientClippingConfig
from bagua_gradient_clipping.feature import GradientClippingFeature

__all__ = ["GradientClippingConfig", "GradientClippingFeature", "bagua_register_features"]


@hookimpl
def bagua_register_features() -> list[type]:
    return [GradientClippingFeature]
