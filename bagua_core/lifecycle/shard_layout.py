"""``ShardLayout``: which shard of a model sharded with FSDP2 this rank holds, and who holds the same one.

A model too large to replicate is sharded with FSDP2 over the ranks of a node (a 1-D ``DeviceMesh``,
``bagua.node_mesh()``); bagua's algorithm runs between the nodes, on each rank's local shards, with the
ranks of the other nodes that hold the same shard. The layout is made once, at the wrap
(``bagua_core.module.sharded``), and kept in the module's state (``ModuleState.shard``): the one record of
it, which every other wing reads from there.

Example::

    >>> layout = state_of(model).shard
    >>> layout.index, layout.count, layout.replica_ranks     # on rank 1 of 2 nodes x 2 ranks
    (1, 2, (1, 3))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ShardLayout"]


@dataclass(frozen=True)
class ShardLayout:
    """Which shard of an FSDP2 model this rank holds, and who holds the same one."""

    index: int
    """This rank's shard: its rank in the shard group (inside its node)."""
    count: int
    """Ranks sharing the model inside a node (the shard group's size)."""
    shard_ranks: tuple[int, ...]
    """The global ranks of this rank's shard group (one node)."""
    replica_ranks: tuple[int, ...]
    """The global ranks holding the same shard, one per node, in node order: the algorithm's group."""
    replica_sets: tuple[tuple[int, ...], ...] = ()
    """Every shard's ``replica_ranks``, by shard index."""
    shard_group: Any = field(default=None, compare=False, repr=False)
    """FSDP2's torch group over ``shard_ranks`` (a collective of the whole node, e.g. agreeing on an overflow)."""
    units: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    """The ``fully_shard``-ed modules with parameters of their own, in backward order
    (``bagua_core.module.sharded.Unit``): FSDP2 reduce-scatters each one's gradients together."""
