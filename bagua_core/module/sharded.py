"""Models sharded with FSDP2 inside a node: bagua runs between the nodes, through FSDP2's public API.

FSDP2 (``fully_shard`` over a 1-D node ``DeviceMesh``, :func:`node_mesh`) gathers, shards and reduce-scatters
inside the node; the algorithm runs between nodes on each rank's local shards, with the ranks holding the same
shard (``bagua_core.lifecycle.shard_layout``). Gradients arrive through ``FSDPModule.set_all_reduce_hook``: each
unit's padded reduce-scatter output is lent to its bucket, whose exchange starts at once, overlapping the rest
of backward as HSDP's all-reduce does (:class:`UnitHandoff`).

A 2-D ("replicate", "shard") mesh is refused: FSDP2 would all-reduce over its replicate dimension itself
(its hook sees the all-reduced gradients) and its public API cannot hand that dimension over.

Example::

    >>> mesh = bagua.node_mesh()                    # 1-D: this node's ranks
    >>> for block in model.blocks:
    ...     fully_shard(block, mesh=mesh)
    >>> fully_shard(model, mesh=mesh)               # the root too
    >>> model = model.with_bagua([optimizer], "diloco")
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from bagua_core.lifecycle.algorithm import is_gradient_tensor
from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.lifecycle.module_state import ModuleState
from bagua_core.lifecycle.shard_layout import ShardLayout
from bagua_core.lifecycle.tensor import local_shard
from bagua_core.plugins import algorithm_registry
from bagua_core.runtime.exceptions import BaguaConfigError, BaguaError
from bagua_core.runtime.failure import Guard
from bagua_core.runtime.process_group import BaguaProcessGroup, get_default_group, new_group

__all__ = ["Unit", "UnitHandoff", "algorithms_supporting_sharding", "check_model", "group_by_unit", "install",
           "lend_buckets", "make_layout", "node_mesh", "verify_lent_layout"]

_TWO_D = ("this model is sharded on a 2-D DeviceMesh {dims}: FSDP2 would then all-reduce the gradients between "
          "the nodes itself. Shard on the node's ranks only and let bagua run between the nodes:\n"
          "    mesh = bagua.node_mesh()    # instead of init_device_mesh(..., mesh_dim_names=(\"replicate\", "
          "\"shard\"))\n    fully_shard(module, mesh=mesh)   # for every block, then the root\n"
          "(or pass your 2-D mesh's mesh[\"shard\"])")

_REDUCE_SCATTER = Guard("the FSDP2 reduce-scatter hook of a wrapped module")


@dataclass(frozen=True)
class Unit:
    """One ``fully_shard``-ed module with parameters of its own: FSDP2 reduce-scatters their gradients together."""

    module: Any
    """The ``FSDPModule``."""
    params: tuple[torch.nn.Parameter, ...]
    """Its parameters, in FSDP2's order (the order of the unit's reduce-scatter output)."""
    slots: tuple[int, ...]
    """The elements each parameter's shard takes in that output (FSDP2 pads a dim-0 shard to ``ceil(d0 / n)``
    rows)."""


def _slot(param: torch.Tensor, ranks: int) -> int:
    placement = param.placements[0]
    dim = getattr(placement, "dim", None)
    if dim is None:
        raise BaguaConfigError(f"a parameter of shape {tuple(param.shape)} is placed as {placement}; bagua runs beside "
                               f"FSDP2's Shard placements (fully_shard's default)")
    if dim == 0:
        return math.ceil(param.shape[0] / ranks) * (param.numel() // param.shape[0] if param.shape[0] else 0)
    return param.numel() // ranks  # FSDP2 shards other dimensions evenly only


def check_model(module: torch.nn.Module) -> tuple[tuple[Unit, ...], tuple[int, ...], Any]:
    """``module``'s FSDP2 units in the order their gradients come (backward order: the deepest last-registered
    first, the root last), the ranks of its mesh and the mesh's group. Checked without communicating (every
    rank reaches the same verdict): the root ``fully_shard``-ed, one 1-D mesh inside one node. Raises
    ``BaguaConfigError`` otherwise, saying what to do."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    if not isinstance(module, FSDPModule):
        raise BaguaConfigError(
            f"the model's root ({type(module).__name__}) is not fully_shard-ed while its parameters are: call "
            f"fully_shard(model, mesh=mesh) on the root too, after its blocks (bagua finds the end of backward "
            f"after FSDP2's own, which the root's fully_shard provides)")
    meshes = {}
    for name, param in module.named_parameters():
        if not isinstance(param, DTensor):
            raise BaguaConfigError(f"parameter {name!r} is not sharded by FSDP2 while others are: fully_shard every "
                                   f"module holding parameters (or its parent), or ignore none of them")
        meshes.setdefault(tuple(param.device_mesh.mesh.flatten().tolist()), param.device_mesh)
    if len(meshes) > 1:
        raise BaguaConfigError(f"the model's parameters are sharded on several meshes ({sorted(meshes)}); bagua needs "
                               f"one: bagua.node_mesh() for the whole model")
    mesh = next(iter(meshes.values()))
    if mesh.ndim != 1:
        raise BaguaConfigError(_TWO_D.format(dims=mesh.mesh_dim_names or mesh.ndim))
    ranks = tuple(int(r) for r in mesh.mesh.tolist())
    node_of = {rank: i for i, members in enumerate(get_default_group().node_ranks) for rank in members}
    if len({node_of[r] for r in ranks}) > 1:
        raise BaguaConfigError(
            f"the mesh crosses nodes: ranks {list(ranks)} share one shard group but are on nodes "
            f"{sorted({node_of[r] for r in ranks})}; shard inside a node (bagua.node_mesh(): the node's ranks) and "
            f"let bagua run between the nodes")
    order = [sub for sub in module.modules() if isinstance(sub, FSDPModule)]
    units = []
    for sub in reversed(order):
        params = _unit_params(sub, FSDPModule)
        if params:
            units.append(Unit(sub, params, tuple(_slot(p, len(ranks)) for p in params)))
    return tuple(units), ranks, mesh.get_group()


def _unit_params(unit: torch.nn.Module, fsdp_module: type) -> tuple[torch.nn.Parameter, ...]:
    """The parameters ``fully_shard(unit)`` manages, in the order of its reduce-scatter output: its modules in
    post-order (each module's children before it, so a parameter of the unit's own module comes after its
    children's, where ``unit.parameters()`` puts it first), not entering a nested ``fully_shard``-ed module,
    each module's own parameters in registration order, a shared parameter where it is first met."""
    modules: list[torch.nn.Module] = []
    visited: set[int] = set()

    def visit(module: torch.nn.Module) -> None:
        if module is not unit and isinstance(module, fsdp_module):
            return  # a unit of its own
        visited.add(id(module))
        for child in module.children():
            if id(child) not in visited:
                visit(child)
        modules.append(module)

    visit(unit)
    params: dict[int, torch.nn.Parameter] = {}
    for module in modules:
        for param in module.parameters(recurse=False):
            params.setdefault(id(param), param)
    return tuple(params.values())


def make_layout(units: tuple[Unit, ...], ranks: tuple[int, ...], shard_group: Any,
                job: BaguaProcessGroup) -> tuple[ShardLayout, BaguaProcessGroup]:
    """This rank's layout and the algorithm's group (the ranks of the other nodes holding the same shard), from
    every rank's mesh. Collective over the job (every rank, in the same order)."""
    meshes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(meshes, ranks)
    distinct = sorted(set(meshes), key=lambda m: m[0])
    if len({len(m) for m in distinct}) != 1:
        raise BaguaConfigError(f"bagua needs the same number of ranks sharing the model on every node; the meshes are "
                               f"{[list(m) for m in distinct]}")
    replica_sets = tuple(zip(*distinct))  # shard j: the j-th rank of every mesh, in node order
    if job.membership.changes and len(replica_sets[0]) > 1:  # refused before any group is made: every rank
        # raises here, and none is left connecting a new group to a store that a rank raising first took down
        raise BaguaConfigError(
            f"fault-tolerant mode: a replica shards the model over its own ranks and the replicas of the "
            f"quorum are the replicate dimension, but this model's sharding replicates inside the replica "
            f"(ranks holding each shard: {[list(r) for r in replica_sets]}); shard over all the "
            f"replica's ranks (bagua.node_mesh() on a replica of one node)")
    me = dist.get_rank()
    made = [new_group(list(members)) for members in replica_sets]  # collective, in the same order everywhere
    group = next(g for g, members in zip(made, replica_sets) if me in members)
    group.siblings = replica_sets
    group.membership = job.membership  # fault-tolerant mode: replicas come and go (what the impl declares for it)
    layout = ShardLayout(index=ranks.index(me), count=len(ranks), shard_ranks=ranks,
                         replica_ranks=next(m for m in replica_sets if me in m), replica_sets=replica_sets,
                         shard_group=shard_group, units=units)
    return layout, group


def group_by_unit(tensors: list[torch.Tensor], units: tuple[Unit, ...]) -> list[list[torch.Tensor]]:
    """The core's bucketing suggestion for a sharded model: the tensors of each unit together (units in backward
    order, each in FSDP2's order), then the tensors that are no unit's parameters, in the order given."""
    unit_of = {id(p): (u, i) for u, unit in enumerate(units) for i, p in enumerate(unit.params)}
    grouped: dict[int, list[tuple[int, torch.Tensor]]] = {}
    rest = []
    for tensor in tensors:
        place = unit_of.get(id(tensor))
        if place is None:
            rest.append(tensor)
        else:
            grouped.setdefault(place[0], []).append((place[1], tensor))
    groups = [[t for _, t in sorted(grouped[u], key=lambda entry: entry[0])] for u in sorted(grouped)]
    return groups + ([rest] if rest else [])


def lend_buckets(buckets: list[BaguaBucket], units: tuple[Unit, ...]) -> dict[int, BaguaBucket]:
    """unit index -> the bucket holding exactly that unit's gradients: laid out as the unit's reduce-scatter
    output, which is lent to it each step (a bucket of other tensors, or of part of a unit, gathers its values
    from the tensors at the end of backward)."""
    lent = {}
    by_members = {frozenset(id(p) for p in unit.params): u for u, unit in enumerate(units)}
    for bucket in buckets:
        u = by_members.get(frozenset(id(t) for t in bucket.tensors))
        if u is None or bucket.flatten or not all(is_gradient_tensor(t) for t in bucket.tensors):
            continue
        unit = units[u]
        offset_of = dict(zip((id(p) for p in unit.params), (sum(unit.slots[:i]) for i in range(len(unit.slots)))))
        bucket.expect_lent_buffer([offset_of[id(t)] for t in bucket.tensors], sum(unit.slots))
        lent[u] = bucket
    return lent


class UnitHandoff:
    """The hook FSDP2 calls with a unit's reduce-scatter output (``set_all_reduce_hook``): lends it to the unit's
    bucket and marks the bucket ready, which starts its exchange while backward goes on. The bucket instead
    gathers its values at the end of backward (same layout, same collectives, no overlap) when FSDP2 will not
    assign the buffer as the gradients (they accumulate into existing ones: ``no_sync`` or gradient accumulation
    without ``zero_grad()``), when some parameter got no gradient (FSDP2 leaves it out), or in fp16 (FSDP2 then
    divides the buffer after the hook, which must not race with the exchange)."""

    __slots__ = ("state", "index", "unit")

    def __init__(self, state: ModuleState, index: int, unit: Unit) -> None:
        self.state, self.index, self.unit = state, index, unit

    def __call__(self, flat: torch.Tensor) -> None:
        state = self.state
        bucket = state.lending.buckets.get(self.index)
        if bucket is None or not state.sync_enabled or state.scheduler is None:
            return
        if flat.numel() != bucket.padded_numel or flat.dtype == torch.float16 or \
                any(p.grad is not None for p in self.unit.params):
            return
        bucket.lend(flat)
        with _REDUCE_SCATTER:
            bucket.mark_all_ready()


class _HookHandle:
    """Takes a unit's hook back (FSDP2 has no removal call: the hook is set to none)."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit

    def remove(self) -> None:
        self.unit.module.set_all_reduce_hook(None)  # FSDP2's default again: no hook


def install(state: ModuleState) -> list[_HookHandle]:
    """Hand every unit's reduce-scatter output to the core (:class:`UnitHandoff`); returns what removes it."""
    handles = []
    for index, unit in enumerate(state.shard.units):
        try:
            unit.module.set_all_reduce_hook(UnitHandoff(state, index, unit))
        except ValueError as exc:  # several parameter groups in one module (shard_placement_fn per mesh)
            raise BaguaConfigError(f"FSDP2 refuses bagua's gradient hook on {type(unit.module).__name__}: {exc}; "
                                   f"shard each module's parameters on the one node mesh") from exc
        handles.append(_HookHandle(unit))
    return handles


def verify_lent_layout(bucket: BaguaBucket, flat: torch.Tensor) -> None:
    """After FSDP2 assigned the gradients of a step whose buffer was lent: every gradient shard is the slot the
    bucket laid out (the buffer was exchanged in that layout). Raises ``BaguaError`` where FSDP2 laid it out
    otherwise (a torch release that changed it)."""
    base, size = flat.data_ptr(), flat.element_size()
    for tensor, offset in zip(bucket.tensors, bucket.offsets):
        grad = local_shard(tensor.grad)
        if grad is not None and grad.numel() and grad.data_ptr() != base + offset * size:
            raise BaguaError(f"FSDP2 placed the gradient shard of a parameter of shape {tuple(tensor.shape)} at "
                             f"element {(grad.data_ptr() - base) // size} of its reduce-scatter output, bagua expected "
                             f"{offset}: this torch release lays the output out differently; please report it")


def algorithms_supporting_sharding() -> list[str]:
    """The installed algorithms whose capabilities declare ``supports_sharding``."""
    return [name for name in algorithm_registry.names()
            if algorithm_registry.get(name).capabilities.supports_sharding]


def node_mesh(device_type: str | None = None) -> Any:
    """The 1-D ``DeviceMesh`` of this rank's node (its ranks, in order; dimension name ``"shard"``): shard the
    model on it with ``fully_shard`` and bagua runs between the nodes. Every node must have the same number of
    ranks. ``device_type``: "cuda" when CUDA is available, else "cpu". Collective (every rank calls it).

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
    return DeviceMesh(device_type, torch.tensor(nodes), mesh_dim_names=("replicate", "shard"))["shard"]
