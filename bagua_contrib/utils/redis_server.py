"""Spawning the node-local ``redis-server`` that ``RedisStore(hosts=None)`` uses, shared by the jobs
on a node.

The first process on the node that asks for a server of a given capacity spawns one and records its
port and pid in ``<state dir>/redis-<capacity>.json`` (state dir: ``$BAGUA_REDIS_STATE_DIR`` or
``/tmp/bagua-redis-<uid>``, mode 0700), under an exclusive ``flock``; later processes find the record,
check that the server answers and connect to it. The server listens on 127.0.0.1 only (protected
mode), keeps nothing on disk (``--save ""``, ``--appendonly no``), and evicts keys (allkeys-lru) once
it holds ``capacity`` bytes. Only the process that spawned a server stops it.

Example::

    >>> server = acquire_local_server(capacity=1 << 30)
    >>> server.port, server.spawned
    (40123, True)
    >>> server.stop()
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

from bagua_core.runtime.exceptions import BaguaError

__all__ = ["LocalRedisServer", "acquire_local_server", "start_redis_server_cli", "state_dir"]

_START_TIMEOUT_S = 10.0


def state_dir() -> str:
    path = os.environ.get("BAGUA_REDIS_STATE_DIR") or f"/tmp/bagua-redis-{os.getuid()}"
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


@dataclass
class LocalRedisServer:
    """A server on 127.0.0.1:``port``; ``spawned`` is True only in the process that started it."""

    port: int
    pid: int
    spawned: bool
    record_path: str
    process: subprocess.Popen | None = None

    def stop(self) -> None:
        """Stop the server if this process spawned it (and forget its record); otherwise do nothing."""
        if not self.spawned or self.process is None:
            return
        with _locked(self.record_path):
            if _read_record(self.record_path).get("pid") == self.pid:
                os.unlink(self.record_path)
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


@contextlib.contextmanager
def _locked(record_path: str) -> Iterator[None]:
    with open(record_path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_record(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _redis_server_binary() -> str:
    binary = os.environ.get("BAGUA_REDIS_SERVER") or shutil.which("redis-server")
    if binary is None:
        raise BaguaError("redis-server not found on PATH: install it (e.g. `apt-get install redis-server`), "
                         "set BAGUA_REDIS_SERVER to its path, or pass RedisStore(hosts=[...])")
    return binary


def start_redis_server_cli(port: int, capacity: int, *args: str) -> None:
    """Start a daemonized ``redis-server`` on ``port`` holding at most ``capacity`` bytes (random
    eviction, nothing kept on disk), with the extra ``redis-server`` arguments ``args``: the original's
    helper, with its flags (it listens on every interface, protected mode off: for servers other nodes
    use as ``RedisStore(hosts=[...])``). Raises when redis-server cannot start.

    Example::

        >>> start_redis_server_cli(7000, 1 << 30, "--bind", "127.0.0.1")
    """
    command = [_redis_server_binary(), "--daemonize", "yes", "--port", str(port), "--maxmemory", str(capacity),
               "--maxmemory-policy", "allkeys-random", "--appendonly", "no", "--save", "",
               "--protected-mode", "no", *[str(a) for a in args]]
    result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode != 0:
        raise BaguaError(f"redis-server failed to start on port {port}: {(result.stdout + result.stderr).strip()[-2000:]}")


def _spawn(capacity: int, log_path: str) -> tuple[subprocess.Popen, int]:
    binary = _redis_server_binary()
    for _ in range(3):  # the free port may be taken between choosing it and binding it
        port = _free_port()
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
                   "--save", "", "--appendonly", "no", "--maxmemory", str(capacity),
                   "--maxmemory-policy", "allkeys-lru", "--daemonize", "no", "--loglevel", "warning"]
        with open(log_path, "wb") as log:  # a file, not a pipe: the server outlives this process
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            if _answers(port):
                return process, port
            time.sleep(0.02)
        if process.poll() is None:
            process.kill()
        process.wait()
        with open(log_path, errors="replace") as log:
            last_error = log.read().strip()[-2000:]
    raise BaguaError(f"redis-server failed to start: {last_error or 'no answer on its port'}")


def acquire_local_server(capacity: int) -> LocalRedisServer:
    """Connect to this node's server of ``capacity`` bytes, spawning it if none is running."""
    record_path = os.path.join(state_dir(), f"redis-{capacity}.json")
    with _locked(record_path):
        record = _read_record(record_path)
        if record.get("port") and _answers(int(record["port"])):
            return LocalRedisServer(int(record["port"]), int(record["pid"]), False, record_path)
        process, port = _spawn(capacity, record_path + ".log")
        tmp = f"{record_path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"port": port, "pid": process.pid, "capacity": capacity}, f)
        os.replace(tmp, record_path)
        return LocalRedisServer(port, process.pid, True, record_path, process)
