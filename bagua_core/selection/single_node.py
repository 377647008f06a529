"""What ``hierarchical=True`` does on a single machine, said where a user chooses.

With ``hierarchical=True`` (the original's default for its compressed and decentralized algorithms) the
ranks of a node average in full precision through the node leader (reduce, then broadcast) and the
algorithm itself runs only among the node leaders. When every rank is on one node there are no other
leaders: nothing is compressed or exchanged with peers, and the reduce and broadcast hand twice an
allreduce's bytes to collectives. ``bagua plugins``, ``bagua train``'s summary and ``algorithm="auto"``
use this module; whether a config has the option is asked of its model, never of a name.
"""

from __future__ import annotations

import os

from bagua_core.lifecycle.algorithm import AlgorithmConfig

__all__ = ["HIERARCHICAL_NOTE", "defaults_to_hierarchical", "is_hierarchical", "on_one_node", "one_node_note",
           "without_hierarchy"]

HIERARCHICAL_NOTE = (
    "hierarchical=True (the default) runs the algorithm's own exchange between nodes only: inside a node the "
    "ranks average in full precision through their leader, so on one machine the algorithm itself never runs; "
    "pass hierarchical=False there"
)


def defaults_to_hierarchical(config_cls: type[AlgorithmConfig]) -> bool:
    """Whether the config model has a ``hierarchical`` option whose default is True."""
    field = config_cls.model_fields.get("hierarchical")
    return field is not None and field.default is True


def is_hierarchical(config: AlgorithmConfig) -> bool:
    return getattr(config, "hierarchical", None) is True


def without_hierarchy(config: AlgorithmConfig) -> AlgorithmConfig:
    """``config`` with ``hierarchical=False`` when it has the option set to True, else ``config``."""
    return type(config)(**{**config.model_dump(), "hierarchical": False}) if is_hierarchical(config) else config


def on_one_node() -> bool:
    """Whether every rank of the job runs on one node: the default group's node membership (node keys
    exchanged at start) once ``init_process_group`` ran, else torchrun's ``LOCAL_WORLD_SIZE ==
    WORLD_SIZE``. The same answer on every rank."""
    from bagua_core.runtime import process_group

    if process_group.is_initialized():
        return len(process_group.get_default_group().node_ranks) == 1
    world = os.environ.get("WORLD_SIZE")
    return world is not None and os.environ.get("LOCAL_WORLD_SIZE", "1") == world


def one_node_note(config: AlgorithmConfig) -> str | None:
    """What to tell a user whose run of ``config`` is on one node with ``hierarchical=True`` (else None)."""
    if not is_hierarchical(config):
        return None
    return (f"note: {config.name} ran with hierarchical=True on one machine, where its own exchange (between nodes "
            f"only) never runs: the ranks averaged in full precision through the node leader. Pass "
            f"hierarchical=False there (bagua train --option hierarchical=false)")
