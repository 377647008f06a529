"""Warm standbys: a replica started ahead of need, which has imported, built and wrapped its model and waits
before it joins anything, so that replacing a failed replica costs a quorum and a heal, not a start.

``bagua run --fault-tolerant --standby N`` starts N standbys beside the replicas (each its own torchrun, like a
replica) and hands each the path of its activation file in ``BAGUA_FT_STANDBY``. A standby runs the training
script as a replica does, up to its first training step (the first forward of a wrapped module, or its first
``QuorumSampler`` batch): there it waits, with no torchft manager yet (it heartbeats to no lighthouse and is in
no quorum), until the job's launcher activates it in place of a failed replica (:func:`activate`: the failed
replica's id and index), or retires it at the job's end (:func:`retire`: it exits with status 0). Once active it
is that replica: its manager starts, it joins the next quorum and heals from a live peer, as a restarted replica
does.

What the waiting costs: the standby's memory (its model and data), and nothing of the CPU (the file is looked at
every 10 ms). A script that must do something only once it serves (write a pid file, say) calls
:func:`wait_for_activation` itself.

Example::

    >>> activated = wait_for_activation()    # in a training script; None when this process is no standby
    >>> activate("/tmp/bagua_ft_x/standby_0.json", replica_id="replica_1", index=1)   # bagua run, at a failure
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["STANDBY_ENV", "is_standby", "activation", "wait_for_activation", "activate", "retire",
           "replica_index"]

STANDBY_ENV = "BAGUA_FT_STANDBY"
"""The activation file of a standby (set by ``bagua run --fault-tolerant --standby N``); absent for a replica."""

_POLL_S = 0.01
_activated: list[float] = []


def is_standby(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process was started as a standby (active or not)."""
    return bool((environ if environ is not None else os.environ).get(STANDBY_ENV))


def activation(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """What the launcher wrote to this standby's activation file (``replica_id`` and ``index``, or ``retire``),
    None while it has written nothing (or for a process that is no standby)."""
    path = (environ if environ is not None else os.environ).get(STANDBY_ENV)
    if not path:
        return None
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):  # (written by a rename: a partial file is never seen)
        return None


def replica_index(environ: Mapping[str, str] | None = None) -> int | None:
    """The replica this process (a replica's launcher or worker) stands for under ``bagua run --fault-tolerant``:
    ``BAGUA_FT_REPLICA_INDEX``, or a standby's index once activated; None otherwise (a standby not yet needed,
    a process outside such a job)."""
    environ = environ if environ is not None else os.environ
    if is_standby(environ):
        found = activation(environ)
        return int(found["index"]) if found and "index" in found else None
    index = environ.get("BAGUA_FT_REPLICA_INDEX")
    return int(index) if index not in (None, "") else None


def wait_for_activation() -> float | None:
    """In a standby: wait until the launcher activates it, then take the replica's id and index into the
    environment (``BAGUA_FT_REPLICA_ID``, ``BAGUA_FT_REPLICA_INDEX``: what the options and reports read) and
    return the time (``time.time()``) it was activated; a retired standby exits here with status 0. None at once
    for a process that is no standby; the activation time again on later calls."""
    if not is_standby():
        return None
    if _activated:
        return _activated[0]
    while (found := activation()) is None:
        time.sleep(_POLL_S)
    if found.get("retire"):
        sys.stdout.flush()
        raise SystemExit(0)
    os.environ["BAGUA_FT_REPLICA_ID"] = str(found["replica_id"])
    os.environ["BAGUA_FT_REPLICA_INDEX"] = str(found["index"])
    _activated.append(time.time())
    return _activated[0]


def _write(path: str, record: dict[str, Any]) -> None:
    partial = f"{path}.partial"
    with open(partial, "w") as fh:
        json.dump(record, fh)
    os.replace(partial, path)  # at once: the standby reads all of it or nothing


def activate(path: str, replica_id: str, index: int) -> None:
    """Make the standby whose activation file is ``path`` replica ``index`` (named ``replica_id``)."""
    _write(path, {"replica_id": replica_id, "index": index, "time": time.time()})


def retire(path: str) -> None:
    """Tell the standby of ``path`` that it will not be needed: it exits with status 0 (at once if it waits,
    else when it reaches its first step)."""
    if not os.path.exists(path):
        _write(path, {"retire": True})
