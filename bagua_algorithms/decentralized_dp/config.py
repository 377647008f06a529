"""The options of ``decentralized_dp`` (the optimizers and the ``GradScaler`` are objects, passed to the
algorithm itself)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from bagua_algorithms.decentralized_dp.topology import topology_registry
from bagua_core.api import AlgorithmConfig

__all__ = ["DecentralizedDPConfig"]


class DecentralizedDPConfig(AlgorithmConfig):
    name: Literal["decentralized_dp"] = "decentralized_dp"
    topology: str = "complete"
    """Registered topology name: complete, ring, one-peer-exp, alternating-exp-ring, or a plugin's."""
    bucket_size_in_mb: float = Field(25.0, gt=0)
    """Size of a bucket of parameters (each bucket has its own optimizer and communication)."""
    grad_clip_norm: float = Field(0.0, ge=0)
    """When > 0, clip each bucket's gradients to this norm before its step."""
    sync_buffer_in_global_avg: bool = False
    """``global_avg`` also averages the module's floating buffers (and broadcasts the others from rank 0)."""

    @field_validator("topology")
    @classmethod
    def _known_topology(cls, value: str) -> str:
        if value not in topology_registry:
            raise ValueError(f"unknown topology {value!r}; available: {', '.join(topology_registry.names())}")
        return value
