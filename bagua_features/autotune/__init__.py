"""Autotuning of a wrapped module's bucket size (and hierarchical on/off where it applies): the feature
``autotune`` (:mod:`.feature`) and its tuner (:mod:`.tuner`). Off unless ``BAGUA_AUTOTUNE=1``, the feature is
selected by name, or :func:`configure` is called.

Example::

    $ BAGUA_AUTOTUNE=1 BAGUA_AUTOTUNE_BUCKET_SIZES=1048576,10485760 bagua train --nproc 2
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_features.autotune.feature import AutotuneFeature, autotune_result, configure
from bagua_features.autotune.tuner import AutotuneConfig, Autotuner

__all__ = ["AutotuneConfig", "AutotuneFeature", "Autotuner", "autotune_result", "bagua_register_features",
           "configure"]


@hookimpl
def bagua_register_features() -> list[type]:
    return [AutotuneFeature]
