"""What the tests see of a launcher's processes from outside: its live descendants, their command lines and
environments (``/proc``), to kill a chosen worker as a user would with ``kill -9``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cmdline", "children", "environ"]


def cmdline(pid: int) -> list[str]:
    """``pid``'s command line ([] once it is gone)."""
    try:
        return [part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]
    except OSError:
        return []


def environ(pid: int) -> dict[str, str]:
    """``pid``'s environment at its start ({} once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(part.decode(errors="replace").split("=", 1) for part in raw.split(b"\0") if b"=" in part)


def children(root: int) -> list[int]:
    """Every live descendant of ``root``."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
