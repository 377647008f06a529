"""Checkpoints of models sharded with FSDP2, in ``torch.distributed.checkpoint``'s format (DCP).

``save_checkpoint`` and ``load_checkpoint`` take this path for a model with ``DTensor`` parameters. The
iteration's directory is a DCP checkpoint (``.metadata`` and one ``.distcp`` file per rank); every rank
writes its own shards, and DCP writes what several ranks hold once. Its keys::

    model/<fqn>                      parameters and buffers (DTensor shards: DCP reshards them on load)
    optim/<fqn>/<state>              the optimizer's state of a parameter (``exp_avg``, ``step``, ...)
    replica_<i>/model/...            the same, per replica (node), when the replicas' weights differ
    replica_<i>/optim/...            (decentralized, asynchronous and DiLoCo-like algorithms)
    rank_<r>/optim/<fqn>/<state>     an optimizer tensor that is neither a DTensor nor a scalar
    rank_<r>/blob                    rank r's other state, serialized: the optimizer's param_groups and
                                     extra entries, the LR scheduler, and bagua's part (the train step
                                     counter, the algorithm's state per shard: error feedback, outer
                                     optimizer, replicas, ...)
    job                              the layout it was saved on, the algorithm, the format

Loading on the layout it was saved on restores every rank bit for bit. On another layout (other ranks
per node, or other nodes) DCP reshards the parameters and the optimizer's state, and bagua restores the
step counter, as far as it is meaningful: an algorithm with state per shard (``AlgorithmImpl.state_dict()``
not empty), or replicas whose weights differ on another number of nodes, are refused with the layout to
load on. Blobs are read with ``torch.load(weights_only=True)``; the tracker is written after every rank's
files, as for replicated models.

Example::

    >>> save_checkpoint(step, "ckpt", sharded_model, optimizer)     # every rank: a DCP checkpoint
    >>> step = load_checkpoint("ckpt", sharded_model, optimizer)    # resharded where the layout changed
"""

from __future__ import annotations

import io
import os
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DTensor, Replicate, Shard

from bagua_features.checkpoints.resume import restore_saved_state
from bagua_core.lifecycle.module_state import state_of
from bagua_core.runtime.exceptions import BaguaError
from bagua_core.runtime.process_group import get_default_group

__all__ = ["is_sharded_checkpoint", "load_sharded", "save_sharded"]

_FORMAT = 3
_MARK = "__bagua_dtensor__"


def is_sharded_checkpoint(directory: str) -> bool:
    """Whether ``directory`` (an iteration's) holds a DCP checkpoint."""
    return os.path.exists(os.path.join(directory, ".metadata"))


# --- the layout ------------------------------------------------------------------------------------
def _mesh_of(model: torch.nn.Module) -> Any:
    return next(p.device_mesh for p in model.parameters() if isinstance(p, DTensor))


def _layout(model: torch.nn.Module) -> tuple[int, int, int]:
    """(nodes, ranks per node, this rank's node) of the model's sharding: a wrapped model's layout
    (``ModuleState.shard``); before the wrap, its 1-D mesh over each node of the job."""
    layout = getattr(state_of(model), "shard", None)
    me = dist.get_rank()
    if layout is not None:
        return len(layout.replica_ranks), layout.count, layout.replica_ranks.index(me)
    mesh = _mesh_of(model)
    if mesh.ndim != 1:
        raise BaguaError(f"a sharded checkpoint needs the model sharded on one node's ranks (bagua.node_mesh()); this "
                         f"one's mesh has {mesh.ndim} dimensions")
    nodes = get_default_group().node_ranks
    return len(nodes), mesh.size(), next(i for i, members in enumerate(nodes) if me in members)


# --- DTensors inside bagua's state (serialized): this rank's shard and where it sits ---------------------
def _pack(value: Any) -> Any:
    if isinstance(value, DTensor):
        placements = []
        for p in value.placements:
            if isinstance(p, Shard):
                placements.append(["S", p.dim])
            elif isinstance(p, Replicate):
                placements.append(["R"])
            else:
                raise BaguaError(f"a checkpoint cannot keep a DTensor placed as {p} (pending reduction)")
        return {_MARK: True, "local": value.to_local(), "placements": placements, "shape": list(value.shape),
                "stride": list(value.stride())}
    if isinstance(value, dict):
        return {k: _pack(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_pack(v) for v in value)
    return value


def _unpack(value: Any, mesh: Any) -> Any:
    if isinstance(value, dict) and value.get(_MARK):
        placements = [Shard(p[1]) if p[0] == "S" else Replicate() for p in value["placements"]]
        return DTensor.from_local(value["local"], mesh, placements, run_check=False,
                                  shape=torch.Size(value["shape"]), stride=tuple(value["stride"]))
    if isinstance(value, dict):
        return {k: _unpack(v, mesh) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_unpack(v, mesh) for v in value)
    return value


def _to_bytes(obj: Any) -> torch.Tensor:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _from_bytes(tensor: torch.Tensor) -> Any:
    return torch.load(io.BytesIO(tensor.numpy().tobytes()), map_location="cpu", weights_only=True)


# --- the optimizer ------------------------------------------------------------------------------------
def _fqns(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The name of each of the optimizer's parameters, in the order of its state dict's indices."""
    names = {id(p): n for n, p in model.named_parameters()}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    missing = [i for i, p in enumerate(params) if id(p) not in names]
    if missing:
        raise BaguaError(f"the optimizer holds {len(missing)} tensors that are not parameters of the model; a "
                         f"sharded checkpoint names the optimizer's state by parameter")
    return [names[id(p)] for p in params]


def _optimizer_entries(model: torch.nn.Module, optimizer: torch.optim.Optimizer, prefix: str,
                       rank: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    fqns = _fqns(model, optimizer)
    saved = optimizer.state_dict()
    tensors, rest = {}, {k: v for k, v in saved.items() if k not in ("state", "param_groups")}
    others: dict[str, dict[str, Any]] = {}
    for index, entries in saved["state"].items():
        for name, value in entries.items():
            key = f"optim/{fqns[index]}/{name}"
            if isinstance(value, DTensor) or (isinstance(value, torch.Tensor) and value.dim() == 0):
                tensors[prefix + key] = value
            elif isinstance(value, torch.Tensor):
                tensors[f"rank_{rank}/{key}"] = value
            else:
                others.setdefault(fqns[index], {})[name] = value
    rest["param_groups"] = [{**g, "params": [fqns[i] for i in g["params"]]} for g in saved["param_groups"]]
    rest["other_state"] = others
    return tensors, rest


# --- save -----------------------------------------------------------------------------------------
def save_sharded(directory: str, iteration: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                 lr_scheduler: Any, bagua_state: dict[str, Any] | None) -> None:
    """Write ``directory`` as a DCP checkpoint (collective: every rank of the job)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    nodes, per_node, node = _layout(model)
    per_replica = bool(bagua_state and bagua_state["per_rank"])
    prefix = f"replica_{node}/" if per_replica else ""
    entries: dict[str, Any] = {prefix + "model/" + k: v for k, v in model.state_dict().items()}
    rest = None
    if optimizer is not None:
        tensors, rest = _optimizer_entries(model, optimizer, prefix, rank)
        entries.update(tensors)
    entries[f"rank_{rank}/blob"] = _to_bytes({
        "optimizer": rest, "lr_scheduler": lr_scheduler.state_dict() if lr_scheduler is not None else None,
        "bagua": _pack(bagua_state)})
    if rank == 0:
        entries["job"] = _to_bytes({
            "format": _FORMAT, "iteration": iteration, "world_size": world, "nodes": nodes, "per_node": per_node,
            "per_replica": per_replica, "algorithm": bagua_state["algorithm"] if bagua_state else None,
            "algorithm_state": bool(bagua_state and bagua_state["state"]),
            "rank_tensors": any(k.startswith(f"rank_{rank}/optim/") for k in entries)})
    os.makedirs(directory, exist_ok=True)
    dcp.save(entries, checkpoint_id=directory)


# --- load -----------------------------------------------------------------------------------------
def _read(directory: str, keys: dict[str, Any]) -> dict[str, Any]:
    dcp.load(keys, checkpoint_id=directory)
    return keys


def _blob(directory: str, metadata: dict[str, Any], key: str) -> Any:
    if key not in metadata:
        raise BaguaError(f"{directory} has no {key!r}: it is incomplete or not a bagua checkpoint")
    return _from_bytes(_read(directory, {key: torch.empty(metadata[key].size, dtype=torch.uint8)})[key])


def _check_layout(directory: str, job: dict[str, Any], nodes: int, per_node: int) -> bool:
    """Whether the checkpoint is loaded on the layout it was saved on; raises where another cannot work."""
    same = (job["nodes"], job["per_node"], job["world_size"]) == (nodes, per_node, dist.get_world_size())
    if same:
        return True
    saved = f"{job['nodes']} node(s) x {job['per_node']} rank(s)"
    now = f"{nodes} x {per_node}"
    if job["algorithm_state"]:
        raise BaguaError(f"the checkpoint in {directory} was saved on {saved} with {job['algorithm']!r}, whose state "
                         f"is per shard; load it on the same layout, not {now}")
    if job["rank_tensors"]:
        raise BaguaError(f"the checkpoint in {directory} holds optimizer tensors that are not DTensors (per rank, "
                         f"saved on {saved}); load it on the same layout, not {now}")
    if job["per_replica"] and job["nodes"] != nodes:
        raise BaguaError(f"the checkpoint in {directory} holds each node's own weights ({job['algorithm']!r} on "
                         f"{saved}); load it on {job['nodes']} nodes, not {nodes}")
    return False


def load_sharded(directory: str, iteration: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                 lr_scheduler: Any, strict: bool = True) -> None:
    """Load the DCP checkpoint in ``directory`` into a model sharded with FSDP2 (collective)."""
    metadata = dcp.FileSystemReader(directory).read_metadata().state_dict_metadata
    job = _blob(directory, metadata, "job")
    nodes, per_node, node = _layout(model)
    same = _check_layout(directory, job, nodes, per_node)
    rank = dist.get_rank()
    prefix = f"replica_{node}/" if job["per_replica"] else ""
    own = _blob(directory, metadata, f"rank_{rank if same else 0}/blob")

    model_state = model.state_dict()
    keys: dict[str, Any] = {prefix + "model/" + k: v for k, v in model_state.items()
                            if prefix + "model/" + k in metadata or strict}
    missing = [k for k in keys if k not in metadata]
    if missing:
        raise BaguaError(f"the checkpoint in {directory} has no {missing[0]!r} ({len(missing)} entries missing): it "
                         f"was saved from another model")
    optim_keys: dict[str, tuple[str, str]] = {}
    if optimizer is not None and own["optimizer"] is not None:
        params = dict(model.named_parameters())
        for key, meta in metadata.items():
            for start in (prefix + "optim/", f"rank_{rank}/optim/"):
                if key.startswith(start) and (start == prefix + "optim/" or same):
                    fqn, name = key[len(start):].rsplit("/", 1)
                    param = params[fqn]
                    if isinstance(param, DTensor) and tuple(meta.size) == tuple(param.shape):
                        keys[key] = torch.empty_like(param, dtype=meta.properties.dtype)
                    else:
                        keys[key] = torch.empty(meta.size, dtype=meta.properties.dtype)
                    optim_keys[key] = (fqn, name)
    _read(directory, keys)
    model.load_state_dict({k: keys[prefix + "model/" + k] for k in model_state if prefix + "model/" + k in keys},
                          strict=strict)
    if optimizer is not None and own["optimizer"] is not None:
        fqns = _fqns(model, optimizer)
        index = {fqn: i for i, fqn in enumerate(fqns)}
        saved = own["optimizer"]
        state: dict[int, dict[str, Any]] = {}
        for key, (fqn, name) in optim_keys.items():
            state.setdefault(index[fqn], {})[name] = keys[key]
        for fqn, values in saved["other_state"].items():
            state.setdefault(index[fqn], {}).update(values)
        groups = [{**g, "params": [index[fqn] for fqn in g["params"]]} for g in saved["param_groups"]]
        extras = {k: v for k, v in saved.items() if k not in ("param_groups", "other_state")}
        optimizer.load_state_dict({"state": state, "param_groups": groups, **extras})
    if lr_scheduler is not None and own["lr_scheduler"] is not None:
        lr_scheduler.load_state_dict(own["lr_scheduler"])
    bagua_state = own["bagua"]
    if bagua_state is not None:
        if not same:  # another layout: the counter, not the state per shard (refused above when there is one)
            bagua_state = {**bagua_state, "state": {}, "per_rank": bagua_state["per_rank"]}
        restore_saved_state(model, iteration, _unpack(bagua_state, _mesh_of(model)))

