"""Wrapping a ``torch.nn.Module``: ``with_bagua`` and the lifecycle hooks it installs."""

from __future__ import annotations

from bagua_core.module.bagua_module import BaguaModule, with_bagua

__all__ = ["BaguaModule", "with_bagua"]
