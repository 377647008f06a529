"""Starting the ranks of one benchmark run: on netns-emulated hosts or on loopback.

``netns_link(hosts, rate, delay)`` is a context manager around the repository's
``benchmarks/netns/hosts.sh`` (namespaces bgh1..bghN at 10.77.0.1..N, joined by a rate-limited
bridge; needs root), always torn down on exit, and held by one run at a time on a machine (:mod:`benchmarks.hosts_lock`). ``launch(module, args, world_size, hosts=...)`` starts one rank per host with the
torchrun variables (GROUP_RANK = host index, so bagua sees one node per host) and waits for all.

Example::

    >>> with netns_link(2, "1gbit", "0ms") as hosts:
    ...     launch("benchmarks.e2e_worker", ["--method", "ddp", "--out", "r.json"], 2, hosts=hosts)
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable, Iterator, Sequence

from benchmarks.hosts_lock import hosts_lock

__all__ = ["NETNS_PREFIX", "NETNS_SCRIPT", "REPO_ROOT", "Hosts", "netns_link", "on_network", "launch", "LaunchError"]

REPO_ROOT = Path(__file__).resolve().parent.parent
NETNS_SCRIPT = REPO_ROOT / "benchmarks" / "netns" / "hosts.sh"
# The names benchmarks.delay_link and benchmarks.hosts_lock assume too (bgh<i>, bgbr0).
NETNS_PREFIX = "bg"
_ports = itertools.count(29600 + os.getpid() % 200 * 10)


class LaunchError(RuntimeError):
    pass


class Hosts(list):
    """The namespace names of the hosts; ``link`` says how the link was emulated."""

    link = ""


@contextlib.contextmanager
def netns_link(hosts: int, rate: str, delay: str) -> Iterator[Hosts]:
    """Bring the emulated network up; yields the namespace names; always brings it down.

    A delay needs the kernel's ``sch_netem``; without it (``Specified qdisc kind is unknown``) the
    hosts come from :mod:`benchmarks.delay_link` instead (TUN devices and a userspace forwarder that
    holds each packet for the delay), and ``hosts.link`` says so."""
    if not NETNS_SCRIPT.exists():
        raise LaunchError(f"{NETNS_SCRIPT} not found: the emulated network needs the repository's "
                          "benchmarks/netns/hosts.sh (run from a full checkout)")
    with hosts_lock():
        yield from _netns_link(hosts, rate, delay)


def tcp_congestion_control() -> str:
    """The TCP congestion control between emulated hosts: ``BAGUA_NETNS_CC`` (hosts.sh sets it on their
    route), else this machine's default (what a new namespace uses). It matters: two flows leaving one
    host share its link unevenly under bbr (see docs/benchmarking.md)."""
    chosen = os.environ.get("BAGUA_NETNS_CC", "")
    if chosen:
        return chosen
    try:
        return Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        return "unknown"


def _hosts_sh(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, BAGUA_NETNS_PREFIX=NETNS_PREFIX)
    return subprocess.run(["bash", str(NETNS_SCRIPT), *args], check=check, capture_output=True, text=True,
                          env=env)


def _netns_link(hosts: int, rate: str, delay: str) -> Iterator[Hosts]:
    try:
        try:
            _hosts_sh("up", str(hosts), rate, delay, check=True)
        except subprocess.CalledProcessError as exc:
            if delay == "0ms" or "qdisc kind is unknown" not in (exc.stderr or ""):
                raise
            _hosts_sh("down")
            from benchmarks.delay_link import delay_link

            with delay_link(hosts, rate, delay) as names:
                found = Hosts(names)
                found.link = f"tbf {rate}, {delay} one-way delay by benchmarks/delay_link.py (no sch_netem here)"
                yield found
            return
        found = Hosts(f"{NETNS_PREFIX}h{i + 1}" for i in range(hosts))
        found.link = (f"tbf {rate}" + (f", {delay} one-way delay by netem" if delay != "0ms" else "")
                      + f", TCP {tcp_congestion_control()}")
        yield found
    finally:
        _hosts_sh("down")


def on_network(spec: dict, world_size: int, loopback: bool, run: Callable[[Hosts | None], None]) -> str | None:
    """``run(hosts)`` on emulated hosts joined by the link of ``spec`` (``rate``, ``delay``), or
    ``run(None)`` on loopback (``loopback``, or a spec without a rate). Returns why the emulated network
    did not come up (the command's last line), or None."""
    if loopback or "rate" not in spec:
        run(None)
        return None
    try:
        with netns_link(world_size, spec["rate"], spec["delay"]) as hosts:
            run(hosts)
    except (subprocess.CalledProcessError, RuntimeError) as exc:
        return (getattr(exc, "stderr", "") or str(exc)).strip().splitlines()[-1]
    return None


def launch(module: str, args: Sequence[str], world_size: int, hosts: Sequence[str] | None = None,
           timeout: float = 300.0, threads: int = 1, comm_timeout: float = 120.0, echo: bool = False,
           ranks_per_host: int = 1) -> None:
    """Run ``python -m module args`` as ``world_size`` ranks, ``ranks_per_host`` consecutive ranks on each
    host (rank i on ``hosts[i // ranks_per_host]``, else loopback, where every group of
    ``ranks_per_host`` ranks still counts as one node); ``echo`` prints rank 0's output."""
    if ranks_per_host < 1 or world_size % ranks_per_host:
        raise ValueError(f"world_size ({world_size}) must be a multiple of ranks_per_host ({ranks_per_host})")
    if hosts and len(hosts) * ranks_per_host < world_size:
        raise ValueError(f"{world_size} ranks at {ranks_per_host} per host need {world_size // ranks_per_host} "
                         f"hosts, got {len(hosts)}")
    port = next(_ports)
    master = "10.77.0.1" if hosts else "127.0.0.1"
    procs, logs = [], []
    for rank in range(world_size):
        node, local = divmod(rank, ranks_per_host)
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(local),
                   LOCAL_WORLD_SIZE=str(ranks_per_host), GROUP_RANK=str(node), MASTER_ADDR=master,
                   MASTER_PORT=str(port), OMP_NUM_THREADS=str(threads), PYTHONPATH=str(REPO_ROOT),
                   BAGUA_COMM_TIMEOUT_S=str(int(comm_timeout)), RUST_LOG=os.environ.get("RUST_LOG", "warn"))
        command = [sys.executable, "-m", module, *args]
        if hosts:
            env["GLOO_SOCKET_IFNAME"] = "eth0"
            command = ["ip", "netns", "exec", hosts[node], *command]
        else:
            env["GLOO_SOCKET_IFNAME"] = "lo"
        # a file, not a pipe: a rank that prints more than a pipe holds while the launcher waits on another
        # rank would block in its write, and the job would hang in its next collective
        logs.append(tempfile.TemporaryFile(mode="w+"))
        procs.append(subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=logs[-1], stderr=subprocess.STDOUT,
                                      text=True))
    outputs, failed = [], False
    deadline = time.monotonic() + timeout
    for proc, log in zip(procs, logs):
        note = ""
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            proc.wait()
            note = f"\n(killed after {timeout:.0f} s)"
            failed = True
        log.seek(0)
        outputs.append(log.read() + note)
        log.close()
        failed = failed or proc.returncode != 0
    if failed:
        tail = "\n".join(f"--- rank {i} (exit code {p.returncode}) ---\n{o[-2000:]}"
                         for i, (p, o) in enumerate(zip(procs, outputs)))
        raise LaunchError(f"{module} {' '.join(args)} failed:\n{tail}")
    if echo:
        print(outputs[0], end="")
