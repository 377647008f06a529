"""Checkpoints of a (possibly bagua-wrapped, possibly MoE) model, optimizer and LR scheduler.

Layout (Megatron/seed style) under ``checkpoints_path``::

    latest_checkpointed_iteration.txt              # the last complete checkpoint
    iter_0000100/mp_rank_00_model_states.pt        # dense parameters, buffers, optimizer, scheduler (rank 0)
    iter_0000100/expert_rank_00001_states.pt       # MoE: each rank's expert parameters and its optimizer
    iter_0000100/algorithm_rank_00001_states.pt    # the algorithm's state on each rank, when it keeps any

Every file is written to a temporary file in the same directory, fsynced and renamed into place; the
tracker is updated (the same way) only after every rank has written its files (a barrier). A crash or
kill in the middle of a save therefore leaves the previous checkpoint loadable. Expert parameters
(``param.allreduce is False``, see ``bagua_contrib.moe``) live on one rank each, so with experts each
rank saves its own experts and its own optimizer state; dense parameters are saved by rank 0. Files
are read with ``torch.load(weights_only=True)``: loading runs no code from the file. A model wrapped
with an algorithm whose impl keeps state (``AlgorithmImpl.state_dict()`` not empty: error feedback,
outer optimizers, step counters) gets it saved by every rank and restored on each rank from its own
file; the checkpoint must then be loaded with the same number of ranks and the same algorithm.

Example::

    >>> save_checkpoint(step, "ckpt", model, optimizer, lr_scheduler)       # on every rank
    >>> step = load_checkpoint("ckpt", model, optimizer, lr_scheduler)      # 0 if there is none
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from bagua_core.exceptions import BaguaError

__all__ = ["TRACKER_FILENAME", "get_checkpoint_name", "load_checkpoint", "read_tracker", "save_checkpoint"]

TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
_FORMAT = 1
logger = logging.getLogger(__name__)


def get_checkpoint_name(checkpoints_path: str, iteration: int, expert_rank: int | None = None,
                        algorithm_rank: int | None = None) -> str:
    """The dense file of ``iteration``, the expert file of ``expert_rank`` or the algorithm state file of
    ``algorithm_rank``."""
    directory = os.path.join(checkpoints_path, f"iter_{iteration:07d}")
    if algorithm_rank is not None:
        return os.path.join(directory, f"algorithm_rank_{algorithm_rank:05d}_states.pt")
    name = "mp_rank_00_model_states.pt" if expert_rank is None else f"expert_rank_{expert_rank:05d}_states.pt"
    return os.path.join(directory, name)


def _algorithm_of(model: torch.nn.Module) -> tuple[str, Any] | None:
    """``(name, impl)`` of the algorithm ``model`` is wrapped with, or None."""
    impl = getattr(model, "bagua_algorithm", None)
    declaration = getattr(model, "_bagua_algorithm_declaration", None)
    if impl is None or declaration is None or not hasattr(impl, "state_dict"):
        return None
    return declaration.name, impl


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _serialize(obj: Any, file: Any) -> None:
    torch.save(obj, file)


def _atomic_write(path: str, write: Any) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(os.path.dirname(path) or ".")


def _rank_and_world() -> tuple[int, int, Any]:
    import bagua_core

    if not bagua_core.is_initialized():
        return 0, 1, None
    return bagua_core.get_rank(), bagua_core.get_world_size(), bagua_core.barrier


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
    rank, world_size, barrier = _rank_and_world()
    dense, experts = _split_state(model)
    dense_path = get_checkpoint_name(checkpoints_path, iteration)
    os.makedirs(os.path.dirname(dense_path), exist_ok=True)
    optimizer_state = optimizer.state_dict() if optimizer is not None else None
    if rank == 0:
        payload = {"format": _FORMAT, "iteration": iteration, "world_size": world_size, "model": dense,
                   "optimizer": None if experts else optimizer_state,
                   "lr_scheduler": lr_scheduler.state_dict() if lr_scheduler is not None else None}
        _atomic_write(dense_path, lambda f: _serialize(payload, f))
    if experts:
        payload = {"format": _FORMAT, "rank": rank, "world_size": world_size, "model": experts,
                   "optimizer": optimizer_state}
        _atomic_write(get_checkpoint_name(checkpoints_path, iteration, rank), lambda f: _serialize(payload, f))
    algorithm = _algorithm_of(model)
    state = algorithm[1].state_dict() if algorithm is not None else {}
    if state:
        payload = {"format": _FORMAT, "rank": rank, "world_size": world_size, "algorithm": algorithm[0], "state": state}
        _atomic_write(get_checkpoint_name(checkpoints_path, iteration, algorithm_rank=rank),
                      lambda f: _serialize(payload, f))
    if barrier is not None:
        barrier()  # every rank's files are in place before the tracker names them
    if rank == 0:
        tracker = os.path.join(checkpoints_path, TRACKER_FILENAME)
        _atomic_write(tracker, lambda f: f.write(str(iteration).encode()))
    if barrier is not None:
        barrier()


def read_tracker(checkpoints_path: str) -> int | None:
    """The iteration of the last complete checkpoint, or ``None`` when there is none."""
    tracker = os.path.join(checkpoints_path, TRACKER_FILENAME)
    if not os.path.exists(tracker):
        return None
    with open(tracker) as f:
        text = f.read().strip()
    if not text.isdigit():
        raise BaguaError(f"{tracker} should hold an iteration number, found {text!r}; fix or delete it")
    return int(text)


def _load(path: str) -> dict:
    if not os.path.exists(path):
        raise BaguaError(f"checkpoint file {path} is missing: the checkpoint is incomplete or was written by a "
                         f"different number of ranks")
    return torch.load(path, map_location="cpu", weights_only=True)


def load_checkpoint(checkpoints_path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    lr_scheduler: Any = None, strict: bool = True) -> int:
    """Load the last complete checkpoint into ``model`` (and ``optimizer``, ``lr_scheduler``); return its
    iteration, or 0 (with a warning) when ``checkpoints_path`` holds none."""
    iteration = read_tracker(checkpoints_path)
    if iteration is None:
        logger.warning("no checkpoint in %s (no %s): starting from iteration 0", checkpoints_path, TRACKER_FILENAME)
        return 0
    rank, world_size, _ = _rank_and_world()
    dense = _load(get_checkpoint_name(checkpoints_path, iteration))
    state, optimizer_state = dict(dense["model"]), dense.get("optimizer")
    _, experts = _split_state(model)
    if experts:
        if dense.get("world_size") != world_size:
            raise BaguaError(f"the checkpoint in {checkpoints_path} has experts saved by {dense.get('world_size')} "
                             f"ranks; load it with the same number of ranks, not {world_size}")
        expert_payload = _load(get_checkpoint_name(checkpoints_path, iteration, rank))
        state.update(expert_payload["model"])
        optimizer_state = expert_payload.get("optimizer")
    model.load_state_dict(state, strict=strict)
    if optimizer is not None and optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    if lr_scheduler is not None and dense.get("lr_scheduler") is not None:
        lr_scheduler.load_state_dict(dense["lr_scheduler"])
    _load_algorithm_state(checkpoints_path, iteration, model, rank, world_size)
    return iteration


def _load_algorithm_state(checkpoints_path: str, iteration: int, model: torch.nn.Module, rank: int,
                          world_size: int) -> None:
    algorithm = _algorithm_of(model)
    path = get_checkpoint_name(checkpoints_path, iteration, algorithm_rank=rank)
    if algorithm is None:
        return
    name, impl = algorithm
    if not os.path.exists(path):
        if impl.state_dict():
            logger.warning("%s holds no state of algorithm %r for rank %d: its state starts fresh", checkpoints_path,
                           name, rank)
        return
    payload = _load(path)
    if payload.get("algorithm") != name:
        raise BaguaError(f"{path} holds the state of algorithm {payload.get('algorithm')!r}, but the model is wrapped "
                         f"with {name!r}; wrap it with the algorithm it was saved with")
    if payload.get("world_size") != world_size:
        raise BaguaError(f"{path} was saved by {payload.get('world_size')} ranks; the state of {name!r} is per rank, "
                         f"so load it with the same number of ranks, not {world_size}")
    impl.load_state_dict(payload["state"])
