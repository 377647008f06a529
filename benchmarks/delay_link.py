"""Emulated hosts with added latency where the kernel has no ``sch_netem``: a userspace delay link.

``benchmarks/netns/hosts.sh`` adds delay with ``netem``; kernels built without it answer
"Specified qdisc kind is unknown". This module builds the same hosts (network namespaces
``bgh1..bghN``, interface ``eth0`` at ``10.77.0.<i>/24``, egress shaped by ``tbf`` to the link rate)
with ``eth0`` a TUN device whose other end is this process, in the root namespace: every IPv4 packet
a host sends is read here, held for ``delay`` and written into the destination host's ``eth0``.
One-way delay is therefore ``delay`` (ping RTT ``2 x delay``), like netem's on each host's egress.
Packets leave in the order they came (constant delay). The MTU is 9000 (jumbo frames; the veths of
hosts.sh have 1500): at 1 Gbit/s the forwarder handles ~14K packets a second, a fifth of a core
(it tops out near 5 Gbit/s; at MTU 1500 near 2 Gbit/s, half a core at 1 Gbit/s). A 64K MTU keeps
TCP's receive window at one or two segments and the rate at 20-150 Mbit/s whatever the link.

    sudo python -m benchmarks.delay_link up 2 1gbit 5ms      # runs until interrupted, then cleans up
    sudo python -m benchmarks.delay_link check 2 1gbit 5ms   # up, measure RTT and throughput, down

From Python, ``with delay_link(2, "1gbit", "5ms") as hosts:`` (as :func:`benchmarks.launch.netns_link`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

from benchmarks.hosts_lock import hosts_lock

__all__ = ["DelayLink", "delay_link", "parse_delay", "measure", "main"]

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
MTU = 9000
SUBNET = "10.77.0"


def parse_delay(text: str) -> float:
    """``"5ms"`` / ``"250us"`` / ``"0.01s"`` -> seconds."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*(s|ms|us)\s*", text)
    if not match:
        raise ValueError(f"delay must look like 5ms, 250us or 0.01s, got {text!r}")
    return float(match.group(1)) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[match.group(2)]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _down(hosts: int) -> None:
    for i in range(1, hosts + 1):
        subprocess.run(["ip", "netns", "del", f"bgh{i}"], capture_output=True)
    subprocess.run(["ip", "link", "del", "bgbr0"], capture_output=True)  # benchmarks/netns/hosts.sh's bridge


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class DelayLink:
    """The hosts and the forwarder. :meth:`up` builds them; :meth:`forward` runs until ``stop()``."""

    def __init__(self, hosts: int, rate: str, delay: str) -> None:
        if hosts < 2:
            raise ValueError(f"a link needs at least 2 hosts, got {hosts}")
        self.hosts, self.rate, self.delay = hosts, rate, parse_delay(delay)
        self.fds: dict[int, int] = {}  # host index -> tun fd
        self.forwarded = 0
        self.dropped = 0
        self._stop = False

    def up(self) -> list[str]:
        _down(self.hosts)
        for i in range(1, self.hosts + 1):
            ns, tun = f"bgh{i}", f"bgt{i}"
            _ip("netns", "add", ns)
            self.fds[i] = _open_tun(tun)
            _ip("link", "set", tun, "netns", ns)
            _ip("-n", ns, "link", "set", tun, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{SUBNET}.{i}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "mtu", str(MTU), "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
                            "rate", self.rate, "burst", "256kb", "latency", "100ms"],
                           check=True, capture_output=True, text=True)
        return [f"bgh{i}" for i in range(1, self.hosts + 1)]

    def stop(self, *_: object) -> None:
        self._stop = True

    def forward(self) -> None:
        """Read every host's packets, write each into its destination host ``delay`` later."""
        pending: collections.deque[tuple[float, int, bytes]] = collections.deque()
        by_fd = {fd: i for i, fd in self.fds.items()}
        readers = list(by_fd)
        while not self._stop:
            timeout = 0.05 if not pending else max(0.0, pending[0][0] - time.monotonic())
            try:
                ready, _, _ = select.select(readers, [], [], timeout)
            except InterruptedError:
                continue
            now = time.monotonic()
            for fd in ready:
                while True:
                    try:
                        packet = os.read(fd, MTU + 64)
                    except BlockingIOError:
                        break
                    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[16:19] != bytes((10, 77, 0)):
                        self.dropped += 1  # not IPv4 to a host of the link (router solicitations...)
                        continue
                    destination = packet[19]
                    if destination not in self.fds:
                        self.dropped += 1
                        continue
                    pending.append((now + self.delay, destination, packet))
            now = time.monotonic()
            while pending and pending[0][0] <= now:
                _, destination, packet = pending.popleft()
                try:
                    os.write(self.fds[destination], packet)
                    self.forwarded += 1
                except OSError:
                    self.dropped += 1

    def down(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        _down(self.hosts)


@contextlib.contextmanager
def delay_link(hosts: int, rate: str, delay: str) -> Iterator[list[str]]:
    """The hosts, with the forwarder running in a child process; always torn down on exit. One run at
    a time per machine (:mod:`benchmarks.hosts_lock`)."""
    parse_delay(delay)
    with hosts_lock():
        yield from _delay_link(hosts, rate, delay)


def _delay_link(hosts: int, rate: str, delay: str) -> Iterator[list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.delay_link", "up", str(hosts), rate, delay],
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("ready"):
            rest = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"the delay link did not start: {(line + rest).strip()}")
        yield [f"bgh{i}" for i in range(1, hosts + 1)]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _down(hosts)


def measure(hosts: list[str], mebibytes: int = 64) -> tuple[float, float]:
    """``(median round-trip seconds of a 1-byte TCP ping-pong, Mbit/s of sending mebibytes)`` from
    the second host to the first (TCP_NODELAY, one connection)."""
    server = (
        "import socket\n"
        "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('10.77.0.1',29900));s.listen()\n"
        "print('listening',flush=True)\n"
        "c,_=s.accept();c.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)\n"
        "for _ in range(21):\n  c.sendall(c.recv(1))\n"
        f"n=0\nwhile n<{mebibytes}<<20:\n  n+=len(c.recv(1<<20))\n"
        "c.sendall(b'k')\n"
    )
    client = (
        "import socket,time\n"
        "c=socket.create_connection(('10.77.0.1',29900));c.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)\n"
        "r=[]\n"
        "for _ in range(21):\n  t=time.perf_counter();c.sendall(b'x');c.recv(1);r.append(time.perf_counter()-t)\n"
        "r.sort();d=bytes(1<<20);t=time.perf_counter()\n"
        f"for _ in range({mebibytes}):\n  c.sendall(d)\n"
        "c.recv(1);print(r[10],time.perf_counter()-t)\n"
    )
    srv = subprocess.Popen(["ip", "netns", "exec", hosts[0], sys.executable, "-c", server],
                           stdout=subprocess.PIPE, text=True)
    try:
        if srv.stdout is None or not srv.stdout.readline().startswith("listening"):
            raise RuntimeError("the measuring server did not start in " + hosts[0])
        out = subprocess.run(["ip", "netns", "exec", hosts[1], sys.executable, "-c", client],
                             check=True, capture_output=True, text=True, timeout=120).stdout.split()
        srv.wait(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
    rtt, seconds = float(out[0]), float(out[1])
    return rtt, mebibytes * 8 * 1.048576 / seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "check"))
    parser.add_argument("hosts", type=int, nargs="?", default=2)
    parser.add_argument("rate", nargs="?", default="1gbit")
    parser.add_argument("delay", nargs="?", default="5ms")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root (network namespaces, TUN devices, tc)")
    if args.command == "check":
        with delay_link(args.hosts, args.rate, args.delay) as hosts:
            rtt, mbits = measure(hosts)
        print(f"rtt median {rtt * 1e3:.2f} ms (expected {2 * parse_delay(args.delay) * 1e3:.2f}), "
              f"throughput {mbits:.0f} Mbit/s (link {args.rate})")
        return
    link = DelayLink(args.hosts, args.rate, args.delay)
    signal.signal(signal.SIGTERM, link.stop)
    signal.signal(signal.SIGINT, link.stop)
    try:
        hosts = link.up()
        print(f"ready: hosts {','.join(hosts)} at {SUBNET}.1..{args.hosts}, link {args.rate}, "
              f"delay {args.delay} (userspace)", flush=True)
        link.forward()
    finally:
        link.down()
        print(f"forwarded {link.forwarded} packets, dropped {link.dropped}", flush=True)


if __name__ == "__main__":
    main()
