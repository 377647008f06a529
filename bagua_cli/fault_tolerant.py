"""``bagua run --fault-tolerant``: replicas that train on when one fails (``docs/fault_tolerance.md``).

Each replica is its own torchrun (one rank, or ``--nproc_per_node`` ranks: a node's), so torchrun's
``--max-restarts`` restarts only the failed replica's workers; the others never stop. With ``--standby N`` the
command keeps N warm standbys and replaces a failed replica by one at once
(:mod:`bagua_cli.fault_tolerant_replicas`). The command starts a torchft lighthouse (or joins ``--lighthouse``),
starts ``--replicas`` replicas on this host, hands them the options in the environment (``BAGUA_FAULT_TOLERANT=1``, ``TORCHFT_LIGHTHOUSE``, ``BAGUA_FT_*``), and returns 0 when
every replica finished, else the first failing replica's exit status. It prints a line for each failure,
restart and heal that the replicas report (``BAGUA_FT_EVENTS``, :mod:`bagua_features.fault_tolerance.events`) and,
at the end, a summary that counts them (:mod:`bagua_cli.fault_tolerant_report`).

What listens, and where: the lighthouse on ``--lighthouse-host`` (default loopback: a one-host job; give this
host's address for replicas on other hosts), on a free port unless ``--lighthouse-port`` names one; the
replicas' own servers on the same address (``BAGUA_FT_HOST``; a host that joins with ``--lighthouse`` uses
its address on the route to the lighthouse). A replica heals over the replicas' process group, so no server
hands out the model. torchft's logs (Rust and Python) are shown at warning level unless ``--verbose``
(``BAGUA_VERBOSE=1``) or ``RUST_LOG`` says otherwise.

Example (two replicas here; a third host joins with ``--lighthouse http://10.0.0.1:29510``)::

    bagua run --fault-tolerant --replicas 2 --lighthouse-host 10.0.0.1 --lighthouse-port 29510 train.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from bagua_cli.fault_tolerant_replicas import ReplicaPool, restart_budget
from bagua_cli.fault_tolerant_report import JobReport
from bagua_features.fault_tolerance import events
from bagua_features.fault_tolerance.options import address_towards

__all__ = ["add_fault_tolerant_arguments", "add_restart_argument", "split_fault_tolerant_args",
           "parse_fault_tolerant_options", "run_fault_tolerant"]

_FLAGS = ("--fault-tolerant", "--replicas", "--lighthouse", "--lighthouse-port", "--lighthouse-host", "--min-replicas",
          "--ft-timeout",
          "--ft-hang-timeout", "--ft-join-timeout-ms", "--ft-heartbeat-timeout-ms", "--standby")


def add_fault_tolerant_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The options of fault-tolerant mode (``bagua run --help`` and ``bagua train --help`` list them)."""
    parser.add_argument("--fault-tolerant", action="store_true",
                        help="replicas that train on when one fails (docs/fault_tolerance.md): each replica is its "
                             "own torchrun, a torchft lighthouse forms a quorum every step")
    parser.add_argument("--replicas", type=int, default=1, help="replicas to start on this host (each its own torchrun)")
    parser.add_argument("--lighthouse", default="", help="join this lighthouse (http://host:port) instead of starting one")
    parser.add_argument("--lighthouse-port", type=int, default=0,
                        help="port of the lighthouse started here (default: a free one)")
    parser.add_argument("--lighthouse-host", default="127.0.0.1",
                        help="the address the lighthouse started here, and this host's replicas' servers, listen on "
                             "and are reached at (default 127.0.0.1: a one-host job; give this host's address for "
                             "replicas on other hosts to join)")
    parser.add_argument("--min-replicas", type=int, default=1, help="a step commits only with this many replicas")
    parser.add_argument("--standby", type=int, default=0, metavar="N",
                        help="keep N warm standbys on this host: replicas started ahead of need, which wait built and "
                             "wrapped before their first step; a failed replica with restarts left (--max-restarts) is "
                             "replaced by one at once (it joins the next quorum and heals; no imports, no model "
                             "building) and another standby is started (default 0: torchrun restarts the replica)")
    parser.add_argument("--ft-timeout", type=float, default=None, metavar="SECONDS",
                        help="a collective between replicas, a commit decision or a heal that takes longer fails the "
                             "step (BAGUA_FT_TIMEOUT_S, default 30)")
    parser.add_argument("--ft-hang-timeout", type=float, default=None, metavar="SECONDS",
                        help="a replica whose step runs this long after its quorum formed leaves the job so the "
                             "others go on (BAGUA_FT_HANG_TIMEOUT_S, default 300)")
    # After a kill the survivors' next quorum waits for the dead replica, which the lighthouse counts as alive
    # until its heartbeat is --ft-heartbeat-timeout-ms old, or for the join timeout, whichever ends first.
    # The join timeout is 1 s, not torchft's 60 (benchmarks/fault_tolerance.py: 5.1 s of stall per kill with
    # 5000, 1.1 s with 1000; a live replica asking later than this after the first is left out of one step and
    # heals at the next; synchronous replicas ask within milliseconds). The heartbeat timeout stays torchft's
    # 5000: at 500 a kill cost 0.49 s instead of 1.12, but the full test suite's load (about 17 on 2 cores)
    # dropped live replicas (a two-replica job healed 5 times without a fault)
    parser.add_argument("--ft-join-timeout-ms", type=int, default=1000,
                        help="how long the lighthouse waits for heartbeating stragglers before forming a quorum")
    parser.add_argument("--ft-heartbeat-timeout-ms", type=int, default=5000,
                        help="the lighthouse drops a replica whose heartbeat stopped this long ago (a killed, stopped "
                             "or cut-off replica; its manager heartbeats every 100 ms)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bagua run --fault-tolerant", add_help=False)
    add_fault_tolerant_arguments(parser)
    return parser


def split_fault_tolerant_args(argv: list[str]) -> tuple[argparse.Namespace | None, list[str]]:
    """The fault-tolerant options among the launcher options (before the script), and the rest for torchrun;
    None when ``--fault-tolerant`` is absent."""
    end = next((i for i, t in enumerate(argv) if t.endswith(".py") or t in ("-m", "--module", "--")), len(argv))
    head, tail = argv[:end], argv[end:]
    if "--fault-tolerant" not in head:
        return None, argv
    ours: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(head):
        token = head[i]
        name = token.split("=", 1)[0]
        if name in _FLAGS:
            ours.append(token)
            if "=" not in token and name != "--fault-tolerant" and i + 1 < len(head):
                ours.append(head[i + 1])
                i += 1
        else:
            rest.append(token)
        i += 1
    options = _parser().parse_args(ours)
    _check(options)
    return options, rest + tail


def _check(options: argparse.Namespace) -> None:
    if options.replicas < 0 or options.min_replicas < 1:
        raise ValueError(f"--replicas must be >= 0 and --min-replicas >= 1, got {options.replicas}, "
                         f"{options.min_replicas}")
    if options.standby < 0:
        raise ValueError(f"--standby must be a non-negative integer, got {options.standby}")


def add_restart_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``bagua train``'s ``--max-restarts`` (``bagua run`` passes torchrun's own to every replica)."""
    parser.add_argument("--max-restarts", "--max_restarts", type=int, default=0, metavar="M",
                        help="restart a failed replica up to M times (each replica's torchrun --max-restarts); "
                             "a restarted replica heals from a live peer (default 0)")


def parse_fault_tolerant_options(argv: list[str]) -> tuple[argparse.Namespace | None, list[str]]:
    """``bagua train``'s form: the fault-tolerant options (and ``--max-restarts``) anywhere in ``argv`` (there
    is no script), and the rest; None when ``--fault-tolerant`` is absent."""
    if "--fault-tolerant" not in argv:
        return None, argv
    parser = _parser()
    add_restart_argument(parser)
    options, rest = parser.parse_known_args(argv)
    _check(options)
    if options.max_restarts < 0:
        raise ValueError(f"--max-restarts must be a non-negative integer, got {options.max_restarts}")
    return options, rest


def _free_port(host: str, port: int = 0) -> int:
    """``port`` on ``host`` if it is free (0: a free one); a port in use is a ``ValueError``."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ValueError(f"--lighthouse-port {port}: {host}:{port} is not free ({exc.strerror}); "
                             "pick another or leave it out (a free one)") from None
        return probe.getsockname()[1]


def _quiet_env(env: dict[str, str]) -> dict[str, str]:
    """torchft's Rust logs at warning level unless the user asked (``RUST_LOG``, ``--verbose``)."""
    if "RUST_LOG" not in env and env.get("BAGUA_VERBOSE", "") not in ("1", "true", "yes", "on"):
        env["RUST_LOG"] = "warn"
    return env


def _start_lighthouse(options: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("torchft_lighthouse")
    if binary is None:
        raise ValueError("torchft_lighthouse was not found: install the fault-tolerant extra "
                         "(pip install -e '.[ft]' or bash setup.sh)")
    host = options.lighthouse_host
    port = _free_port(host, options.lighthouse_port or 0)
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    proc = subprocess.Popen([binary, "--min_replicas", str(options.min_replicas), "--bind", bind,
                             "--join_timeout_ms", str(options.ft_join_timeout_ms),
                             "--heartbeat_timeout_ms", str(options.ft_heartbeat_timeout_ms)],
                            env=_quiet_env(dict(os.environ)))
    _wait_listening(proc, host, port, LIGHTHOUSE_START_S)
    return proc, f"http://{bind}"


LIGHTHOUSE_START_S = 120.0
"""How long the lighthouse may take to listen: its script imports torchft (and torch) first, seconds on a loaded
host, and a replica asking for a quorum before it listens would fail."""


def _wait_listening(proc: subprocess.Popen, host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            if proc.poll() is None:
                return
        except OSError:
            pass
        if proc.poll() is not None:  # (another program may be listening there)
            raise ValueError(f"the lighthouse exited (status {proc.returncode}) before it listened on {host}:{port}; "
                             "its output above says why")
        if time.monotonic() > deadline:
            proc.kill()
            raise ValueError(f"the lighthouse did not listen on {host}:{port} within {timeout_s:g} s")
        time.sleep(0.1)


def run_fault_tolerant(options: argparse.Namespace, torchrun_args: list[str]) -> int:
    """Start (or join) the lighthouse and ``options.replicas`` replicas; wait for them (module doc)."""
    max_restarts = 0
    if options.standby:  # the restarts are this launcher's (a standby takes a failed replica's place)
        max_restarts, torchrun_args = restart_budget(torchrun_args)
        if max_restarts < 1:
            raise ValueError(f"--standby {options.standby} replaces a failed replica, which is a restart: give "
                             "--max-restarts M (M >= 1, per replica)")
    lighthouse_proc = None
    address = options.lighthouse
    if not address:
        lighthouse_proc, address = _start_lighthouse(options)
        where = "this host only" if options.lighthouse_host in ("127.0.0.1", "::1", "localhost") else \
            f"other hosts join with --lighthouse {address}"
        print(f"bagua: lighthouse at {address} ({where})", flush=True)
    host = options.lighthouse_host if not options.lighthouse else address_towards(address)
    env = _quiet_env({**os.environ, "BAGUA_FAULT_TOLERANT": "1", "TORCHFT_LIGHTHOUSE": address,
                      "BAGUA_FT_MIN_REPLICAS": str(options.min_replicas), "BAGUA_FT_HOST": host})
    env.setdefault("OMP_NUM_THREADS", "1")
    if options.ft_timeout is not None:
        env["BAGUA_FT_TIMEOUT_S"] = str(options.ft_timeout)
    if options.ft_hang_timeout is not None:
        env["BAGUA_FT_HANG_TIMEOUT_S"] = str(options.ft_hang_timeout)
    events_dir = tempfile.mkdtemp(prefix="bagua_ft_")
    env[events.EVENTS_ENV] = events_path = os.path.join(events_dir, "events.jsonl")
    per_replica = [] if any(t.split("=")[0] in ("--nproc_per_node", "--nproc-per-node") for t in torchrun_args) \
        else ["--nproc_per_node=1"]  # a replica is one rank unless told otherwise
    # each replica through bagua's own launcher: torchrun's logs quiet, one traceback per failure
    command = [sys.executable, "-m", "bagua_cli", "run", "--standalone", *per_replica, *torchrun_args]
    report = JobReport(options.replicas)
    pool = ReplicaPool(command, env, report, options.replicas, options.standby, max_restarts, events_dir, _say)
    offset = 0

    def read_events() -> list[dict]:
        nonlocal offset
        new, offset = events.read_new(events_path, offset)
        return new

    try:
        status = pool.run(read_events, 0.05 if options.standby else 0.2)  # a standby replaces a failure at once
        _say(report.summary())
        return status
    finally:
        pool.close()
        if lighthouse_proc is not None:
            lighthouse_proc.terminate()
            lighthouse_proc.wait(timeout=10)
        shutil.rmtree(events_dir, ignore_errors=True)


def _say(line: str | None) -> None:
    if line:
        print(line, flush=True)
