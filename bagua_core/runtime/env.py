"""The launcher's environment: ranks, sizes, master address, and bagua's own tunables.

Before ``init_process_group`` the values come from the torchrun variables (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); after it, rank and world size come from the
process group and the local rank/size from the node membership actually found (see
:mod:`bagua_core.runtime.process_group`), which stays right when ranks run on different hosts.

This module is the bottom of the core: it imports nothing of it. The process group layer, above it,
hands it the current membership with :func:`set_membership_source` when it is imported.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "get_local_size",
    "get_node_rank",
    "get_master_addr",
    "get_master_port",
    "get_default_bucket_size",
    "get_node_key",
    "get_comm_timeout_s",
    "get_exit_timeout_s",
    "get_communicator_backend",
    "get_small_allreduce_bytes",
    "get_nonfinite_policy",
    "find_free_network_port",
    "get_autotune_server_wait_time",
    "RankFacts",
    "verbose",
    "set_membership_source",
]

DEFAULT_BUCKET_SIZE = 10 * 1024 * 1024
DEFAULT_SMALL_ALLREDUCE_BYTES = 128 * 1024


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None


class RankFacts(Protocol):
    """What the environment reads from the default process group once there is one."""

    @property
    def global_rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def local_rank(self) -> int: ...
    @property
    def local_size(self) -> int: ...
    @property
    def node_rank(self) -> int: ...


def _no_group() -> RankFacts | None:
    return None


_membership_source: Callable[[], RankFacts | None] = _no_group


def set_membership_source(source: Callable[[], RankFacts | None]) -> None:
    """Where :func:`get_rank` and the others find the default process group (None: not initialized).
    Called by ``bagua_core.runtime.process_group`` at import: env, below it, must not import it."""
    global _membership_source
    _membership_source = source


def _group() -> RankFacts | None:
    return _membership_source()


def get_rank() -> int:
    """Global rank of this process (0 when not distributed)."""
    group = _group()
    return group.global_rank if group is not None else _int_env("RANK", 0)


def get_world_size() -> int:
    """Number of processes in the job (1 when not distributed)."""
    group = _group()
    return group.world_size if group is not None else _int_env("WORLD_SIZE", 1)


def get_local_rank() -> int:
    """Rank of this process among the processes of its node."""
    group = _group()
    return group.local_rank if group is not None else _int_env("LOCAL_RANK", 0)


def get_local_size() -> int:
    """Number of processes on this node."""
    group = _group()
    return group.local_size if group is not None else _int_env("LOCAL_WORLD_SIZE", 1)


def get_node_rank() -> int:
    """Index of this node (0 .. number of nodes - 1), nodes ordered by their lowest rank."""
    group = _group()
    return group.node_rank if group is not None else _int_env("GROUP_RANK", 0)


def get_master_addr() -> str:
    return os.environ.get("MASTER_ADDR", "127.0.0.1")


def get_master_port() -> int:
    return _int_env("MASTER_PORT", 29500)


def get_default_bucket_size() -> int:
    """Bucket size in bytes: ``BAGUA_DEFAULT_BUCKET_SIZE`` or 10 MiB."""
    size = _int_env("BAGUA_DEFAULT_BUCKET_SIZE", DEFAULT_BUCKET_SIZE)
    if size <= 0:
        raise ValueError(f"BAGUA_DEFAULT_BUCKET_SIZE must be a positive number of bytes, got {size}")
    return size


def get_small_allreduce_bytes(raw: str | None = None) -> int:
    """Allreduces of CPU tensors on gloo up to this many bytes use recursive doubling over
    point-to-point messages instead of gloo's ring (:mod:`bagua_core.runtime.communication.small_allreduce`):
    ``BAGUA_SMALL_ALLREDUCE_BYTES`` (or ``raw``), default 128 KiB, 0 turns it off."""
    if raw is None:
        raw = os.environ.get("BAGUA_SMALL_ALLREDUCE_BYTES", "")
    if raw.strip() == "":
        return DEFAULT_SMALL_ALLREDUCE_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"BAGUA_SMALL_ALLREDUCE_BYTES must be a number of bytes >= 0 (0: off), got {raw!r}")
    return value


def get_node_key() -> str:
    """What identifies this process's node: ``BAGUA_NODE_ID``, else torchrun's ``GROUP_RANK``, else
    the host name. Ranks with equal keys share a node."""
    for name in ("BAGUA_NODE_ID", "GROUP_RANK"):
        value = os.environ.get(name)
        if value not in (None, ""):
            return f"{name}={value}"
    return f"host={socket.gethostname()}"


def get_comm_timeout_s() -> float:
    """Timeout of a collective before it fails instead of hanging: ``BAGUA_COMM_TIMEOUT_S`` or 600."""
    return float(os.environ.get("BAGUA_COMM_TIMEOUT_S", "600"))


def get_exit_timeout_s() -> float:
    """How long a rank may take to shut down (``destroy_process_group``, and from the end of its script to
    its exit) before it dumps its threads' stacks and exits with status 1: ``BAGUA_EXIT_TIMEOUT_S`` or 60;
    0 turns the watch off (:mod:`bagua_core.runtime.exit_watch`)."""
    raw = os.environ.get("BAGUA_EXIT_TIMEOUT_S", "").strip()
    try:
        value = float(raw) if raw else 60.0
    except ValueError:
        raise ValueError(f"BAGUA_EXIT_TIMEOUT_S must be a number of seconds (0: off), got {raw!r}") from None
    if value < 0:
        raise ValueError(f"BAGUA_EXIT_TIMEOUT_S must be >= 0 (0: off), got {raw!r}")
    return value


COMMUNICATOR_BACKENDS = ("torch", "nccl")


def get_communicator_backend() -> str:
    """Which library runs the collectives on CUDA tensors: ``BAGUA_COMMUNICATOR=torch`` (default,
    torch.distributed's NCCL/gloo process groups) or ``nccl`` (bagua's native NCCL communicator)."""
    value = os.environ.get("BAGUA_COMMUNICATOR", "torch").strip().lower() or "torch"
    if value not in COMMUNICATOR_BACKENDS:
        raise ValueError(f"BAGUA_COMMUNICATOR must be one of {COMMUNICATOR_BACKENDS}, got {value!r}")
    return value


NONFINITE_POLICIES = ("propagate", "raise")


def get_nonfinite_policy() -> str:
    """What compressed exchanges do with a chunk holding NaN/Inf: ``BAGUA_NONFINITE=propagate``
    (default: the chunk arrives as NaN on every rank, as an allreduce carries it, so ``GradScaler``
    skips the step everywhere) or ``raise`` (``NonFiniteError`` on the rank that has it: debugging)."""
    value = os.environ.get("BAGUA_NONFINITE", "propagate").strip().lower() or "propagate"
    if value not in NONFINITE_POLICIES:
        raise ValueError(f"BAGUA_NONFINITE must be one of {NONFINITE_POLICIES}, got {value!r}")
    return value


def find_free_network_port() -> int:
    """A TCP port free on this host now (bound to port 0 and released; another process may take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        return sock.getsockname()[1]


def verbose() -> bool:
    """``BAGUA_VERBOSE=1`` (``bagua run --verbose``): every rank's traceback, and the logs of the libraries
    bagua runs on (torchft, torch's launcher) at their own level instead of warnings only."""
    return os.environ.get("BAGUA_VERBOSE", "").strip().lower() in ("1", "true", "yes", "on")


def get_autotune_server_wait_time() -> int:
    """Seconds the original waited for its autotune server (``BAGUA_AUTOTUNE_SERVER_WAIT_TIME``,
    default 300). This project tunes inside the job (``BAGUA_AUTOTUNE=1``) and starts no server; the
    value is read for code that passes it on."""
    return _int_env("BAGUA_AUTOTUNE_SERVER_WAIT_TIME", 300)
