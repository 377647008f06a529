"""Counts of what the collectives moved: calls and payload bytes per collective, per process.

"Payload bytes" are the bytes of the tensors this process handed to each collective (its part of the exchange),
not the wire traffic of the backend's algorithm (a ring allreduce sends about twice that). Point-to-point exchanges
count as ``send`` (what this process sends; what it receives is its peer's send). An algorithm that calls
``torch.distributed`` itself records its collectives here too, each once, as it sends it (one that a thread of
its own issues later: on the training thread, so the step's count holds it). ``bagua train`` reports them.
"""

from __future__ import annotations

import threading
from collections import defaultdict

__all__ = ["record", "snapshot", "reset", "total_bytes"]

_lock = threading.Lock()
_calls: dict[str, int] = defaultdict(int)
_bytes: dict[str, int] = defaultdict(int)


def record(collective: str, nbytes: int) -> None:
    with _lock:
        _calls[collective] += 1
        _bytes[collective] += int(nbytes)


def snapshot() -> dict[str, dict[str, int]]:
    """``{collective: {"calls": n, "bytes": b}}`` so far in this process."""
    with _lock:
        return {name: {"calls": _calls[name], "bytes": _bytes[name]} for name in sorted(_calls)}


def total_bytes() -> int:
    with _lock:
        return sum(_bytes.values())


def reset() -> None:
    with _lock:
        _calls.clear()
        _bytes.clear()
