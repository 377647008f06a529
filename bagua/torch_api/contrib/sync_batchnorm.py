"""``SyncBatchNorm``: batch norm with statistics over every rank."""

from __future__ import annotations

from bagua_contrib.sync_batchnorm import SyncBatchNorm

__all__ = ["SyncBatchNorm"]
