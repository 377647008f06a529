"""``SyncBatchNorm``, and the feature ``sync_batchnorm``: batch normalisation over the whole distributed
batch.

``layer`` (the layer, ``SyncBatchNorm.convert_sync_batchnorm``) and ``feature`` (the model's BatchNorm layers
converted when the module is wrapped, as ``convert_sync_batchnorm`` by hand before the wrap does).

Example::

    >>> model = model.with_bagua([optimizer], "gradient_allreduce", features={"sync_batchnorm": {}})
    >>> # by hand: SyncBatchNorm.convert_sync_batchnorm(model).with_bagua([optimizer], "gradient_allreduce")
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_contrib.sync_batchnorm.feature import SyncBatchNormConfig, SyncBatchNormFeature
from bagua_contrib.sync_batchnorm.layer import SyncBatchNorm

__all__ = ["SyncBatchNorm", "SyncBatchNormConfig", "SyncBatchNormFeature", "bagua_register_features"]


@hookimpl
def bagua_register_features() -> list[type]:
    """The feature ``sync_batchnorm`` (:mod:`.feature`)."""
    return [SyncBatchNormFeature]
