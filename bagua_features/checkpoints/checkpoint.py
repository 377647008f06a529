"""Checkpoints of a (possibly bagua-wrapped, possibly MoE) model, optimizer and LR scheduler.

Layout (Megatron/seed style) under ``checkpoints_path``::

    latest_checkpointed_iteration.txt              # the last complete checkpoint
    iter_0000100/mp_rank_00_model_states.pt        # dense parameters, buffers, optimizer, scheduler (rank 0)
    iter_0000100/expert_rank_00001_states.pt       # MoE: each rank's expert parameters and its optimizer
    iter_0000100/rank_00001_states.pt              # each rank's own state (below)

A bagua-wrapped module (or the decentralized data-parallel wrapper) also saves what an exact resume
needs (``bagua_checkpoint_state``: the train step counter, the algorithm's ``state_dict``: replicas,
per-bucket optimizers, topology step). When the ranks' weights differ (decentralized and asynchronous
algorithms), every rank saves its own weights and optimizer state in its rank file, and resuming keeps
them (``with_bagua`` does not broadcast rank 0's over them). Every rank must load the same checkpoint:
``with_bagua`` compares the iteration each rank resumed from.

Every file is written to a temporary file in the same directory, fsynced and renamed into place; the
tracker is updated (the same way) only after every rank has written its files. A crash or kill in the
middle of a save therefore leaves the previous checkpoint loadable; a write that fails on one rank
(disk full, permissions) raises on every rank, naming that rank and the error, and leaves the tracker
alone (the group stays usable). Expert parameters
(``param.allreduce is False``, see ``bagua_contrib.moe``) live on one rank each, so with experts each
rank saves its own experts and its own optimizer state; dense parameters are saved by rank 0. Files
are read with ``torch.load(weights_only=True)``: loading runs no code from the file. A model wrapped
with an algorithm whose impl keeps state (``AlgorithmImpl.state_dict()`` not empty: error feedback,
outer optimizers, step counters) gets it saved by every rank and restored on each rank from its own
file; the checkpoint must then be loaded with the same number of ranks and the same algorithm.

A model sharded with FSDP2 (``DTensor`` parameters) is saved in ``torch.distributed.checkpoint``'s format
instead, the iteration's directory a DCP checkpoint (``bagua_features.checkpoints.sharded``): each rank writes
its shards, and loading on another layout reshards what DCP can.

Example::

    >>> save_checkpoint(step, "ckpt", model, optimizer, lr_scheduler)       # on every rank
    >>> step = load_checkpoint("ckpt", model, optimizer, lr_scheduler)      # 0 if there is none
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from bagua_core.runtime import env
from bagua_core.runtime.agreement import agree_or_raise
from bagua_features.checkpoints.files import (
    TRACKER_FILENAME,
    atomic_write,
    get_checkpoint_name,
    get_rank_checkpoint_name,
    load_file,
    read_tracker,
)
from bagua_features.checkpoints.resume import restore_saved_state, saved_state_of
from bagua_core.lifecycle.tensor import is_sharded, register_shards
from bagua_core.runtime.exceptions import BaguaError
from bagua_core.runtime.process_group import get_default_group, is_initialized

__all__ = ["TRACKER_FILENAME", "get_checkpoint_name", "get_rank_checkpoint_name", "load_checkpoint", "read_tracker",
           "save_checkpoint"]

_FORMAT = 2
logger = logging.getLogger(__name__)


def _serialize(obj: Any, file: Any) -> None:
    torch.save(obj, file)


def _rank_and_world() -> tuple[int, int, Any]:
    if not is_initialized():
        return 0, 1, None
    return env.get_rank(), env.get_world_size(), get_default_group().get_global_communicator()


def _on_every_rank(comm: Any, step: Any, what: str) -> None:
    """Run ``step`` on every rank; a failure anywhere raises on every rank (no rank waits for another)."""
    if comm is None:
        step()
    else:
        agree_or_raise(comm, step, what=what)


def _is_expert(param: torch.Tensor) -> bool:
    return hasattr(param, "allreduce") and not param.allreduce


def _split_state(model: torch.nn.Module) -> tuple[dict, dict]:
    expert_names = {name for name, param in model.named_parameters() if _is_expert(param)}
    state = model.state_dict()
    dense = {k: v for k, v in state.items() if k not in expert_names}
    experts = {k: v for k, v in state.items() if k in expert_names}
    return dense, experts


def save_checkpoint(iteration: int, checkpoints_path: str, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None = None, lr_scheduler: Any = None) -> None:
    """Save a checkpoint of ``iteration`` (call on every rank; collective when bagua is initialised)."""
    if not isinstance(iteration, int) or iteration < 0:
        raise ValueError(f"iteration must be a non-negative integer, got {iteration!r}")
    rank, world_size, comm = _rank_and_world()
    register_shards(model)  # an evaluation's forward may have left FSDP2's root unsharded (the algorithm's state too)
    # first: an algorithm may finish its communication in flight into the weights (decentralized_dp)
    bagua_state = saved_state_of(model)
    if is_sharded(model):
        from bagua_features.checkpoints.sharded import save_sharded  # DCP and DTensor: imported for sharded models only

        directory = os.path.dirname(get_checkpoint_name(checkpoints_path, iteration))
        save_sharded(directory, iteration, model, optimizer, lr_scheduler, bagua_state)  # DCP: raises on every rank
        _on_every_rank(comm, lambda: _write_tracker(checkpoints_path, iteration, rank),
                       f"save_checkpoint({iteration}, {checkpoints_path!r}): the tracker")
        return
    per_rank = bool(bagua_state and bagua_state["per_rank"])
    rank_files = per_rank or bool(bagua_state and bagua_state["state"])
    dense, experts = _split_state(model)
    optimizer_state = optimizer.state_dict() if optimizer is not None else None

    def write_files() -> None:
        dense_path = get_checkpoint_name(checkpoints_path, iteration)
        os.makedirs(os.path.dirname(dense_path), exist_ok=True)
        if rank == 0:
            summary = None if bagua_state is None else {**bagua_state, "state": {}, "rank_files": rank_files}
            payload = {"format": _FORMAT, "iteration": iteration, "world_size": world_size, "model": dense,
                       "optimizer": None if experts else optimizer_state, "bagua": summary,
                       "lr_scheduler": lr_scheduler.state_dict() if lr_scheduler is not None else None}
            atomic_write(dense_path, lambda f: _serialize(payload, f))
        if experts:
            payload = {"format": _FORMAT, "rank": rank, "world_size": world_size, "model": experts,
                       "optimizer": optimizer_state}
            atomic_write(get_checkpoint_name(checkpoints_path, iteration, rank), lambda f: _serialize(payload, f))
        if rank_files:
            payload = {"format": _FORMAT, "rank": rank, "world_size": world_size, "bagua": bagua_state,
                       "model": {**dense, **experts} if per_rank else None,
                       "optimizer": optimizer_state if per_rank else None}
            atomic_write(get_rank_checkpoint_name(checkpoints_path, iteration, rank), lambda f: _serialize(payload, f))

    # every rank's files are in place before the tracker names them
    _on_every_rank(comm, write_files, f"save_checkpoint({iteration}, {checkpoints_path!r})")
    _on_every_rank(comm, lambda: _write_tracker(checkpoints_path, iteration, rank),
                   f"save_checkpoint({iteration}, {checkpoints_path!r}): the tracker")


def _write_tracker(checkpoints_path: str, iteration: int, rank: int) -> None:
    if rank == 0:
        tracker = os.path.join(checkpoints_path, TRACKER_FILENAME)
        atomic_write(tracker, lambda f: f.write(str(iteration).encode()))


def load_checkpoint(checkpoints_path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    lr_scheduler: Any = None, strict: bool = True) -> int:
    """Load the last complete checkpoint into ``model`` (and ``optimizer``, ``lr_scheduler``); return its
    iteration, or 0 (with a warning) when ``checkpoints_path`` holds none. Call it before ``with_bagua``
    (or on the wrapped module): the algorithm's state is restored when the module is wrapped."""
    iteration = read_tracker(checkpoints_path)
    if iteration is None:
        logger.warning("no checkpoint in %s (no %s): starting from iteration 0", checkpoints_path, TRACKER_FILENAME)
        return 0
    rank, world_size, _ = _rank_and_world()
    register_shards(model)
    directory = os.path.dirname(get_checkpoint_name(checkpoints_path, iteration))
    from bagua_features.checkpoints.sharded import is_sharded_checkpoint, load_sharded  # DCP: imported when loading

    if is_sharded_checkpoint(directory) != is_sharded(model):
        raise BaguaError(
            f"the checkpoint of iteration {iteration} in {checkpoints_path} was saved from a "
            f"{'sharded' if is_sharded_checkpoint(directory) else 'replicated'} model and this one is "
            f"{'sharded' if is_sharded(model) else 'replicated'}; load it into a model sharded the same way "
            f"(torch.distributed.checkpoint.format_utils converts between DCP and torch.save files)")
    if is_sharded_checkpoint(directory):
        load_sharded(directory, iteration, model, optimizer, lr_scheduler, strict=strict)
        return iteration
    dense = load_file(get_checkpoint_name(checkpoints_path, iteration))
    state, optimizer_state = dict(dense["model"]), dense.get("optimizer")
    _, experts = _split_state(model)
    if experts:
        if dense.get("world_size") != world_size:
            raise BaguaError(f"the checkpoint in {checkpoints_path} has experts saved by {dense.get('world_size')} "
                             f"ranks; load it with the same number of ranks, not {world_size}")
        expert_payload = load_file(get_checkpoint_name(checkpoints_path, iteration, rank))
        state.update(expert_payload["model"])
        optimizer_state = expert_payload.get("optimizer")
    bagua_state = dense.get("bagua")
    if bagua_state is not None and bagua_state.get("rank_files"):
        if dense.get("world_size") != world_size:
            raise BaguaError(f"the checkpoint in {checkpoints_path} holds each rank's own state ({bagua_state['algorithm']}) "
                             f"saved by {dense.get('world_size')} ranks; load it with the same number of ranks, "
                             f"not {world_size}")
        own = load_file(get_rank_checkpoint_name(checkpoints_path, iteration, rank))
        bagua_state = own["bagua"]
        if own.get("model") is not None:
            state, optimizer_state = dict(own["model"]), own.get("optimizer")
    model.load_state_dict(state, strict=strict)
    if optimizer is not None and optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    if lr_scheduler is not None and dense.get("lr_scheduler") is not None:
        lr_scheduler.load_state_dict(dense["lr_scheduler"])
    if bagua_state is not None:
        restore_saved_state(model, iteration, bagua_state)
    return iteration

