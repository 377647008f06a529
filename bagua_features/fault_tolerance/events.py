"""What a fault-tolerant job's processes tell ``bagua run --fault-tolerant``: a replica's failure, its
restart, a heal, one JSON line each in the file named by ``BAGUA_FT_EVENTS``.

The launcher of the job sets ``BAGUA_FT_EVENTS`` for every replica it starts; a replica's own launcher
(torchrun's agent) reports ``failed`` (its workers failed and a restart follows, or it is out of restarts)
and ``restarted`` (torchrun started its workers again), and the first rank of a replica reports ``healed``
(its state came from a live peer). Without ``BAGUA_FT_EVENTS`` nothing is written. Each event is one
``write`` of one line to a file opened for appending, so lines of different processes never mix.

Example::

    >>> report("healed", step=57, bytes=421_000, seconds=0.31)   # in a replica, under bagua run --fault-tolerant
    >>> events, offset = read_new("/tmp/bagua_ft_x/events.jsonl", 0)
    >>> events[0]["event"], events[0]["replica"]
    ('healed', 1)
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from bagua_features.fault_tolerance import standby

__all__ = ["EVENTS_ENV", "report", "read_new"]

EVENTS_ENV = "BAGUA_FT_EVENTS"


def report(event: str, **fields: Any) -> None:
    """Append ``event`` (with this replica's index, ``BAGUA_FT_REPLICA_INDEX`` or an activated standby's, None
    for a standby not yet needed; this process's pid; and ``fields``) to the job's events file; nothing when this
    process is not a replica of ``bagua run --fault-tolerant``. Never raises: a report that cannot be written is
    lost, the training goes on."""
    path = os.environ.get(EVENTS_ENV)
    if not path:
        return
    index = standby.replica_index()
    record = {"event": event, "replica": 0 if index is None and not standby.is_standby() else index,
              "pid": os.getpid(), "time": time.time(), **fields}
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def read_new(path: str, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The events written to ``path`` after byte ``offset`` (whole lines only) and the offset after them."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    events = []
    for line in data[:end].splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:  # not one of ours: skip it
            continue
    return events, offset + end
