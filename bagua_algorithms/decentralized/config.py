"""The options of ``decentralized``."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from bagua_algorithms.decentralized.weights import check_positive_int
from bagua_core.api import AlgorithmConfig

__all__ = ["DecentralizedConfig"]


class DecentralizedConfig(AlgorithmConfig):
    name: Literal["decentralized"] = "decentralized"
    hierarchical: bool = True
    """Average inside each node first; the peers are then the nodes."""
    peer_selection_mode: Literal["all", "shift_one"] = "all"
    """"all": average with every peer; "shift_one": with one partner that changes every round (an odd number of
    peers: one of them, in turn, has no partner in a round and keeps its weights)."""
    communication_interval: int = 1
    """Communicate every this many training steps (steps t with t % communication_interval == 0)."""

    _check_interval = field_validator("communication_interval", mode="before")(check_positive_int)
