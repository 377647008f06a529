"""One emulated host at a fraction of its speed (``benchmarks.lm --slow-host I:F``), the other hosts' CPU untouched.

Host ``I`` (counted from 0: the host of rank 0 is host 0) runs at ``F`` of its speed: each of its training
steps takes ``1/F`` times as long. A rank of that host measures the CPU time its training thread spent in the
step (forward, backward, the optimizer and whatever the method computes on that thread; waiting on the
network costs no CPU) and then adds ``(1/F - 1)`` times that, inside the step and on the training clock.
How the extra time is spent depends on the cores (``os.sched_getaffinity``):

- **a core per rank** (at least as many cores as ranks): rank ``r`` is pinned to the ``r``-th core
  (``os.sched_setaffinity``) and the slow host's ranks *sleep* the extra time. Sleeping frees only their
  own core, which no other host's rank may use: the other hosts get exactly the CPU they had.
- **fewer cores than ranks**: each host's ranks are pinned to a share of the cores of their own where there
  are at least as many cores as hosts (else nobody is pinned), and the slow host's ranks *burn* the extra
  time as CPU (small matrix products until the thread's CPU clock has advanced by it): a slow host does
  ``1/F`` times its work, so it asks the shared cores for exactly as much as it would if it computed, and a
  sleep cannot hand its share to another host. The run's description says which.

The equal-speed run beside it (``F`` = 1) is pinned the same way and adds nothing. The CPU time is what the
step computed: where other work keeps the cores busy, a step's wall time exceeds it and the slowdown falls
short of ``1/F``, so the report states the slowdown measured (the hosts' throughputs training ``alone``).

Example::

    >>> pace = Pace(SlowHost.parse("1:0.5"), rank=1, ranks_per_host=1, world_size=2)
    >>> pace.begin(); ...; pace.end()       # a step of host 1: it now took about twice its compute
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

__all__ = ["SlowHost", "Pace", "plan_cores"]


@dataclass(frozen=True)
class SlowHost:
    host: int
    fraction: float

    @classmethod
    def parse(cls, text: str, hosts: int | None = None) -> SlowHost:
        """``"I:F"``: host index I (from 0), speed fraction F in (0, 1]."""
        try:
            index, fraction = text.split(":")
            slow = cls(int(index), float(fraction))
        except ValueError:
            raise ValueError(f"--slow-host must be HOST:FRACTION such as 1:0.5 (host 1 at half speed), got {text!r}") from None
        if not 0 < slow.fraction <= 1:
            raise ValueError(f"--slow-host's fraction must be in (0, 1] (0.5: half speed), got {slow.fraction}")
        if slow.host < 0 or (hosts is not None and slow.host >= hosts):
            raise ValueError(f"--slow-host's host must be 0..{(hosts or 1) - 1} (hosts count from 0), got {slow.host}")
        return slow

    def label(self) -> str:
        return "equal speeds" if self.fraction == 1 else f"host {self.host} at {self.fraction:g} speed"


def plan_cores(cores: list[int], rank: int, ranks_per_host: int, world_size: int) -> tuple[str, list[int] | None]:
    """(how the slow host spends its extra time, the cores ``rank`` is pinned to or None): module doc."""
    hosts = world_size // ranks_per_host
    if len(cores) >= world_size:
        return "sleep", [cores[rank]]
    if len(cores) >= hosts:
        share, host = len(cores) // hosts, rank // ranks_per_host
        return "burn", cores[host * share : (host + 1) * share]
    return "burn", None


class Pace:
    """This rank's pinning (made at construction) and the slow host's extra time per step."""

    def __init__(self, slow: SlowHost | None, rank: int, ranks_per_host: int, world_size: int) -> None:
        self.slow = slow
        self.extra = 0.0 if slow is None or rank // ranks_per_host != slow.host else 1 / slow.fraction - 1
        self.mode, self.cores = "none", None
        self._cpu = 0.0
        self.added_s = 0.0
        if slow is None:
            return
        self.mode, self.cores = plan_cores(sorted(os.sched_getaffinity(0)), rank, ranks_per_host, world_size)
        if self.cores is not None:
            os.sched_setaffinity(0, self.cores)  # threads made later (gloo's, torch's) inherit it

    def describe(self) -> str:
        if self.slow is None:
            return ""
        pinned = "each rank pinned to a core of its own" if self.mode == "sleep" else (
            "each host's ranks pinned to cores of their own, sharing them" if self.cores else
            "more hosts than cores: nobody pinned, hosts share the cores")
        how = {"sleep": "sleeps", "burn": "burns CPU for"}[self.mode]
        return f"{self.slow.label()}: {pinned}; the slow host {how} (1/F - 1) x its step's CPU time"

    def begin(self) -> None:
        if self.extra:
            self._cpu = time.thread_time()

    def end(self) -> None:
        """After the step's work: the slow host's extra time (nothing on the other hosts)."""
        if not self.extra:
            return
        extra = self.extra * (time.thread_time() - self._cpu)
        self.added_s += extra
        if self.mode == "sleep":
            time.sleep(extra)
            return
        until = time.thread_time() + extra
        a = torch.ones(64, 64)
        while time.thread_time() < until:
            torch.mm(a, a)
