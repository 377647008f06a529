"""What the tests see of a launcher's processes from outside: its live descendants, their command lines and
environments (``/proc``), to kill a chosen worker as a user would with ``kill -9``; and a job's output as it comes
(:class:`JobOutput`)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path

__all__ = ["JobOutput", "cmdline", "children", "environ"]


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


class JobOutput:
    """The job's output, read as it comes (by a thread), so the test can wait for the progress bar."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.text = ""
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        while chunk := proc.stdout.read1(4096):
            with self.lock:
                self.text += chunk.decode(errors="replace")

    def steps(self) -> int:
        with self.lock:
            counts = re.findall(r"\(fault-tolerant\): +(\d+) ?step", self.text)
        return int(counts[-1]) if counts else 0
