"""Models sharded with FSDP2 inside a node: bagua runs between the nodes.

A model too large to replicate is sharded with torch's own FSDP2 (``fully_shard`` on a 2-D
``DeviceMesh`` with dimensions ``("replicate", "shard")``, the shard dimension inside a node: torch's HSDP
code). Inside a node FSDP2 gathers, shards and reduce-scatters as usual; ``with_bagua`` takes the
replicate dimension over: FSDP2's all-reduce between the nodes is turned off (each of its parameter
groups gets a one-rank replicate group, so FSDP2 averages over the shard group only) and the algorithm
runs on each rank's local shards (``DTensor.to_local()``: the reduce-scattered gradient shards, or the
weight shards) with the ranks of the other nodes that hold the same shard: a ``BaguaProcessGroup`` over
the replicate dimension, whose ``shard`` says which shard it is (:class:`ShardLayout`).

:func:`check_mesh` checks the mesh (one mesh for every parameter; the shard dimension inside a node,
else a clear error), :func:`take_over` turns FSDP2's replicate all-reduce off and returns the layout and
the algorithm's group; :func:`node_mesh` builds the mesh from bagua's node layout.

Example::

    >>> mesh = bagua.node_mesh()                    # ("replicate", "shard"): nodes x ranks per node
    >>> for block in model.blocks:
    ...     fully_shard(block, mesh=mesh)
    >>> fully_shard(model, mesh=mesh)
    >>> model = model.with_bagua([optimizer], "diloco")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from bagua_core.plugins import algorithm_registry
from bagua_core.runtime.exceptions import BaguaConfigError
from bagua_core.runtime.process_group import BaguaProcessGroup, get_default_group, new_group

__all__ = ["Mesh", "ShardLayout", "algorithms_supporting_sharding", "check_mesh", "is_sharded", "node_mesh", "take_over"]


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
    """Every shard's ``replica_ranks``, by shard index: an algorithm that makes groups of its own over its
    ranks makes one per set, in this order, on every rank (torch's ``new_group`` is collective)."""
    shard_group: Any = field(default=None, compare=False, repr=False)
    """FSDP2's torch group over ``shard_ranks`` (a collective of the whole node, e.g. agreeing on an overflow)."""


def is_sharded(module: torch.nn.Module) -> bool:
    """Whether ``module`` has parameters sharded by FSDP2 (``DTensor`` parameters)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def _param_groups(module: torch.nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    groups = []
    for sub in module.modules():
        if isinstance(sub, FSDPModule):
            groups += [g for g in sub._get_fsdp_state()._fsdp_param_groups if g is not None]
    return groups


_singletons: dict[int, Any] = {}
_replica_groups: dict[tuple[tuple[int, ...], ...], BaguaProcessGroup] = {}


def _singleton() -> Any:
    """A one-rank torch group of this rank (created once, collectively, for every rank)."""
    if not _singletons:
        for rank in range(dist.get_world_size()):
            group = dist.new_group([rank])
            if rank == dist.get_rank():
                _singletons[rank] = group
    return _singletons[dist.get_rank()]


@dataclass(frozen=True)
class Mesh:
    """What :func:`check_mesh` found: the model's FSDP2 parameter groups, this rank's shard group, and the
    ranks holding each shard (one per node)."""

    param_groups: tuple[Any, ...]
    shard_ranks: tuple[int, ...]
    replica_sets: tuple[tuple[int, ...], ...]


def check_mesh(module: torch.nn.Module) -> Mesh:
    """``module``'s FSDP2 mesh, checked without communicating (every rank reaches the same verdict): one
    mesh for every parameter, its shard dimension inside a node. Raises ``BaguaConfigError`` otherwise,
    saying what to do."""
    groups = _param_groups(module)
    if not groups:
        raise BaguaConfigError("the model has DTensor parameters but no FSDP2 module holds them: shard it with "
                               "torch.distributed.fsdp.fully_shard on a DeviceMesh (bagua.node_mesh()), or pass "
                               "plain parameters")
    meshes = {id(g.mesh_info.mesh): g.mesh_info for g in groups}
    if len({tuple(info.mesh.mesh.flatten().tolist()) + (info.mesh.ndim,) for info in meshes.values()}) > 1:
        raise BaguaConfigError("the model's parameters are sharded on several meshes; bagua needs one "
                               "(\"replicate\", \"shard\") mesh for the whole model")
    info = next(iter(meshes.values()))
    if info.mesh.ndim > 2:
        raise BaguaConfigError(f"bagua runs beside FSDP2 on a 1-D or 2-D (\"replicate\", \"shard\") mesh; this model's "
                               f"mesh has {info.mesh.ndim} dimensions")
    shard_ranks = tuple(dist.get_process_group_ranks(info.shard_process_group))
    node_of = {rank: i for i, members in enumerate(get_default_group().node_ranks) for rank in members}
    if len({node_of[r] for r in shard_ranks}) > 1:
        nodes = sorted({node_of[r] for r in shard_ranks})
        raise BaguaConfigError(
            f"the mesh's shard dimension crosses nodes: ranks {list(shard_ranks)} share one shard group but are on "
            f"nodes {nodes}; shard inside a node (mesh_dim_names=('replicate', 'shard') with the shard dimension "
            f"one node's ranks: bagua.node_mesh()) and let bagua run between the nodes")
    mesh = info.mesh.mesh
    if info.mesh.ndim == 2:
        replicate_dim = getattr(info, "replicate_mesh_dim", None)
        replicate_dim = 0 if replicate_dim is None else replicate_dim
        columns = mesh.transpose(0, 1) if replicate_dim == 0 else mesh
        replica_sets = tuple(tuple(int(r) for r in column) for column in columns)  # one per shard index
    else:  # FSDP alone, inside one node: each shard is held by one rank
        replica_sets = tuple((int(r),) for r in mesh.flatten())
    return Mesh(tuple(groups), shard_ranks, replica_sets)


def take_over(mesh: Mesh) -> tuple[ShardLayout, BaguaProcessGroup]:
    """Turn FSDP2's replicate all-reduce off for every parameter group of ``mesh`` and return this rank's
    shard layout with the algorithm's group (the ranks of the other nodes holding the same shard).
    Collective: every rank of the job calls it, for the same mesh (after :func:`check_mesh`)."""
    me = dist.get_rank()
    if mesh.replica_sets not in _replica_groups:
        made = [new_group(list(ranks)) for ranks in mesh.replica_sets]  # collective, in the same order everywhere
        _replica_groups[mesh.replica_sets] = next(g for g, ranks in zip(made, mesh.replica_sets) if me in ranks)
    group = _replica_groups[mesh.replica_sets]
    # the job's membership: in fault-tolerant mode replicas come and go, and what an impl reified on this group at
    # the wrap declares for that mode (what a joiner heals) is the policy the runtime keeps
    group.membership = get_default_group().membership
    solo = _singleton()
    for param_group in mesh.param_groups:
        mesh_info = param_group.mesh_info
        if hasattr(mesh_info, "replicate_process_group"):  # HSDP: its all-reduce between nodes is bagua's now
            mesh_info.replicate_process_group = solo
            mesh_info.replicate_mesh_size, mesh_info.replicate_mesh_rank = 1, 0
    replica_ranks = next(ranks for ranks in mesh.replica_sets if me in ranks)
    layout = ShardLayout(index=mesh.shard_ranks.index(me), count=len(mesh.shard_ranks),
                         shard_ranks=mesh.shard_ranks, replica_ranks=replica_ranks,
                         replica_sets=mesh.replica_sets,
                         shard_group=mesh.param_groups[0].mesh_info.shard_process_group)
    group.shard = layout  # what the algorithm reified on it learns: it runs on shards
    return layout, group


def algorithms_supporting_sharding() -> list[str]:
    """The installed algorithms whose capabilities declare ``supports_sharding``."""
    return [name for name in algorithm_registry.names()
            if algorithm_registry.get(name).capabilities.supports_sharding]


def node_mesh(device_type: str | None = None) -> Any:
    """The 2-D ``DeviceMesh`` ``("replicate", "shard")`` of bagua's node layout: one row per node, its ranks
    along the shard dimension (every node the same number of ranks). ``device_type``: "cuda" when CUDA
    is available, else "cpu". Collective.

    Example::

        >>> mesh = node_mesh()
        >>> fully_shard(model, mesh=mesh)
    """
    from torch.distributed.device_mesh import DeviceMesh

    nodes = get_default_group().node_ranks
    if len({len(members) for members in nodes}) != 1:
        raise BaguaConfigError(f"node_mesh needs the same number of ranks on every node, got "
                               f"{[len(m) for m in nodes]} (nodes {nodes})")
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    return DeviceMesh(device_type, torch.tensor(nodes), mesh_dim_names=("replicate", "shard"))
