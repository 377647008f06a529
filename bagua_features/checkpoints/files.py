"""The files of a checkpoint: their names, atomic writes, the tracker, safe loading.

Example::

    >>> get_checkpoint_name("ckpt", 100)
    'ckpt/iter_0000100/mp_rank_00_model_states.pt'
    >>> atomic_write("ckpt/x.pt", lambda f: torch.save(obj, f))    # temp file, fsync, rename, fsync dir
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, Any

import torch

from bagua_core.runtime.exceptions import BaguaError

__all__ = ["TRACKER_FILENAME", "atomic_write", "get_checkpoint_name", "get_rank_checkpoint_name", "load_file",
           "read_tracker"]

TRACKER_FILENAME = "latest_checkpointed_iteration.txt"


def get_checkpoint_name(checkpoints_path: str, iteration: int, expert_rank: int | None = None) -> str:
    """The dense file of ``iteration``, or the expert file of ``expert_rank``."""
    directory = os.path.join(checkpoints_path, f"iter_{iteration:07d}")
    name = "mp_rank_00_model_states.pt" if expert_rank is None else f"expert_rank_{expert_rank:05d}_states.pt"
    return os.path.join(directory, name)


def get_rank_checkpoint_name(checkpoints_path: str, iteration: int, rank: int) -> str:
    """The file of one rank's own state (its weights and optimizer when they differ across ranks, and
    its algorithm's state)."""
    return os.path.join(checkpoints_path, f"iter_{iteration:07d}", f"rank_{rank:05d}_states.pt")


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, write: Callable[[IO[bytes]], Any]) -> None:
    """Write through a temporary file in the same directory, fsync it, rename it into place."""
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


def load_file(path: str) -> dict:
    """``torch.load(weights_only=True)``: loading runs no code from the file."""
    if not os.path.exists(path):
        raise BaguaError(f"checkpoint file {path} is missing: the checkpoint is incomplete or was written by a "
                         f"different number of ranks")
    return torch.load(path, map_location="cpu", weights_only=True)
