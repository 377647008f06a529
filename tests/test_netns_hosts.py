"""The repository's own emulated network (``benchmarks/netns/hosts.sh``): the benchmarks find it inside
the repository, it refuses clearly without its tools or root, and as root it brings up hosts that reach
each other over a rate-limited link and tears them down completely. The root-only test uses a name
prefix of its own, so it never touches the hosts of a benchmark running on the same machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from benchmarks import network_cpu
from benchmarks.delay_link import measure
from benchmarks.launch import NETNS_SCRIPT, REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "netns" / "hosts.sh"


def _run(*args: str, prefix: str | None = None, path: str | None = None,
         user: list[str] | None = None, script: Path = SCRIPT, cc: str | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "BAGUA_NETNS_CC"}
    if cc is not None:
        env["BAGUA_NETNS_CC"] = cc
    if prefix is not None:
        env["BAGUA_NETNS_PREFIX"] = prefix
    if path is not None:
        env["PATH"] = path
    bash = shutil.which("bash") or "/bin/bash"
    return subprocess.run([*(user or []), bash, str(script), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout


def test_launch_uses_the_script_inside_the_repository() -> None:
    assert NETNS_SCRIPT == SCRIPT
    assert NETNS_SCRIPT.is_file(), NETNS_SCRIPT
    assert REPO_ROOT in NETNS_SCRIPT.resolve().parents  # never a path beside the checkout
    assert os.access(NETNS_SCRIPT, os.X_OK), f"{NETNS_SCRIPT} is not executable"
    assert subprocess.run(["bash", "-n", str(NETNS_SCRIPT)]).returncode == 0  # it parses


def test_usage_and_bad_arguments_are_refused() -> None:
    usage = _run()
    assert usage.returncode == 2 and "up N RATE [DELAY]" in usage.stderr
    bad_prefix = _run("down", prefix="Not-OK")
    assert bad_prefix.returncode == 1 and "BAGUA_NETNS_PREFIX must be" in bad_prefix.stderr
    bad_cc = _run("down", cc="cubic; reboot")
    assert bad_cc.returncode == 1 and "BAGUA_NETNS_CC must name a congestion control" in bad_cc.stderr


def test_missing_tools_are_named(tmp_path: Path) -> None:
    result = _run("up", "2", "1gbit", path=str(tmp_path))  # an empty PATH: no ip, no tc
    assert result.returncode == 1
    assert "'ip' not found on PATH: install iproute2" in result.stderr


@pytest.mark.skipif(shutil.which("ip") is None or shutil.which("tc") is None, reason="needs iproute2")
def test_not_root_is_refused() -> None:
    user: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root and no setpriv to drop privileges with")
        user = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    # A copy the unprivileged user can read, wherever the checkout is.
    with tempfile.TemporaryDirectory() as scratch:
        os.chmod(scratch, 0o755)
        script = Path(scratch) / "hosts.sh"
        shutil.copy(SCRIPT, script)
        os.chmod(script, 0o755)
        result = _run("up", "2", "1gbit", user=user, script=script)
    assert result.returncode == 1, result.stderr
    assert "needs root to create network namespaces" in result.stderr


def _can_make_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (ip, tc)"
    probe = f"bagua-probe-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None if made.returncode == 0 else f"ip netns add fails here: {made.stderr.strip()}"


@pytest.mark.timeout(120)
@pytest.mark.skipif(_can_make_namespaces() is not None, reason=str(_can_make_namespaces()))
def test_two_hosts_reach_each_other_over_the_rate_limited_link() -> None:
    prefix = "t" + uuid.uuid4().hex[:6]
    hosts = [f"{prefix}h1", f"{prefix}h2"]
    try:
        up = _run("up", "2", "40mbit", prefix=prefix)
        assert up.returncode == 0, up.stderr
        assert set(hosts) <= _namespaces()
        for host in hosts:
            qdisc = subprocess.run(["ip", "netns", "exec", host, "tc", "qdisc", "show", "dev", "eth0"],
                                   capture_output=True, text=True, check=True).stdout
            assert "tbf" in qdisc and "rate 40Mbit" in qdisc, qdisc
        # A TCP ping-pong and 4 MiB from the second host to the first over 10.77.0.0/24: they connect,
        # and the throughput is the tbf's, not a veth's (tens of Gbit/s).
        rtt, mbits = measure(hosts, mebibytes=4)
        assert rtt < 0.05, rtt
        assert 20 < mbits <= 46, mbits  # 40 Mbit/s, plus what the 256 KiB burst lets through at once
        # the CPU the machine spends per byte moved between them (the cost model's async term): some, and
        # far less than a core for the whole transfer (4 MiB: under 0.4 s at 100 ns per byte)
        per_byte = network_cpu.measure(hosts, 4 << 20, repeats=1, timeout_s=60)
        assert 0 < per_byte < 1e-7, per_byte
    finally:
        down = _run("down", prefix=prefix)
    assert down.returncode == 0, down.stderr
    assert not set(hosts) & _namespaces()
    assert f"{prefix}br0" not in _links() and f"{prefix}v1" not in _links()
    again = _run("down", prefix=prefix)  # idempotent
    assert again.returncode == 0, again.stderr


@pytest.mark.skipif(_can_make_namespaces() is not None, reason=str(_can_make_namespaces()))
def test_a_failed_up_leaves_nothing_behind() -> None:
    prefix = "t" + uuid.uuid4().hex[:6]
    try:
        # A rate that passes the script's check and that tc rejects: it fails after the bridge and the
        # first namespace exist.
        result = _run("up", "2", "1000000000000gbit", prefix=prefix)
        assert result.returncode != 0
        assert not any(name.startswith(prefix) for name in _namespaces())
        assert f"{prefix}br0" not in _links()
    finally:
        _run("down", prefix=prefix)


_CONNECTION_CC = """
import socket, sys, time
if sys.argv[1] == "serve":
    server = socket.create_server(("10.77.0.2", 5601))
    server.accept()[0].recv(1)
else:
    for _ in range(100):
        try:
            client = socket.create_connection(("10.77.0.2", 5601), timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    print(client.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode())
    client.send(b"x")
"""


@pytest.mark.timeout(120)
@pytest.mark.skipif(_can_make_namespaces() is not None, reason=str(_can_make_namespaces()))
def test_the_hosts_congestion_control_is_chosen() -> None:
    """BAGUA_NETNS_CC sets the TCP congestion control of connections between the hosts (on their route:
    a namespace may not select one the root namespace does not allow); without it, the machine's."""
    default = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    other = next((cc for cc in ("cubic", "reno", "bbr") if cc in available and cc != default), None)
    if other is None:
        pytest.skip(f"no congestion control other than {default} is available here")
    for chosen, expected in ((other, other), (None, default)):
        prefix = "t" + uuid.uuid4().hex[:6]
        try:
            up = _run("up", "2", "100mbit", prefix=prefix, cc=chosen)
            assert up.returncode == 0, up.stderr
            server = subprocess.Popen(["ip", "netns", "exec", f"{prefix}h2", sys.executable, "-c", _CONNECTION_CC,
                                       "serve"])
            try:
                client = subprocess.run(["ip", "netns", "exec", f"{prefix}h1", sys.executable, "-c", _CONNECTION_CC,
                                         "connect"], capture_output=True, text=True, timeout=60)
            finally:
                server.wait(timeout=30)
            assert client.returncode == 0, client.stderr
            assert client.stdout.strip() == expected, (chosen, client.stdout)
        finally:
            _run("down", prefix=prefix)
