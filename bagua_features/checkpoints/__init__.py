"""Checkpoints: saving and loading training state and resuming exactly.

``checkpoint`` (the original's ``save_checkpoint``/``load_checkpoint``), ``files`` (file names, the
tracker, atomic writes), ``resume`` (what a wrapped module saves and restores of its algorithm and features),
``sharded`` (models sharded with FSDP2, in ``torch.distributed.checkpoint``'s format) and ``feature`` (the feature
``checkpoints``: resume at the wrap, save every few steps).
"""

from __future__ import annotations

from bagua_core.api import hookimpl
from bagua_features.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from bagua_features.checkpoints.feature import CheckpointsFeature

__all__ = ["CheckpointsFeature", "bagua_register_features", "load_checkpoint", "save_checkpoint"]


@hookimpl
def bagua_register_features() -> list[type]:
    """The feature ``checkpoints`` (:mod:`.feature`)."""
    return [CheckpointsFeature]
