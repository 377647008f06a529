"""How much CPU this machine spends per byte moved between two emulated hosts.

The emulated hosts of ``benchmarks.scale`` are network namespaces on one machine: a byte one rank sends to
another crosses TCP, a veth pair, the bridge and the sender's shaper, and the receiver's TCP, all on the
same cores the ranks compute on. A method whose exchange waits on the link hides that work in its wait;
async's averaging runs beside the step, so its bytes' CPU slows the step. This measures it: a sender on
one host streams ``nbytes`` to a receiver on the other over the (shaped) link, and the CPU time of both
processes (their system calls: TCP, the veth, the bridge, the shaper) plus the machine's interrupt and
``ksoftirqd`` time during the transfer is divided by the bytes. Both ends' work counts, as every byte a
rank sends is a byte another receives. Other processes' work is not counted; interrupts serving them
during the transfer are, so a quiet machine is best, as for the rest of the benchmark.

    sudo python -m benchmarks.network_cpu --rate 100mbit       # brings two hosts up and down

Example::

    >>> with netns_link(2, "100mbit", "0ms") as hosts:
    ...     seconds_per_byte = measure(hosts)                     # about 1e-9 on a 2-core VM
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

__all__ = ["measure", "main"]

_PORT = 5599
_CHUNK = 1 << 20
_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); buf = memoryview(bytearray(1 << 20)); got = 0
import resource; u = resource.getrusage(resource.RUSAGE_SELF); before = u.ru_utime + u.ru_stime
while (k := c.recv_into(buf)):
    got += k
u = resource.getrusage(resource.RUSAGE_SELF); print(got, u.ru_utime + u.ru_stime - before, flush=True)
"""
_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); data = bytes(1 << 20)
sys.stdin.readline()  # go
import resource; u = resource.getrusage(resource.RUSAGE_SELF); before = u.ru_utime + u.ru_stime
for _ in range(int(sys.argv[3])):
    c.sendall(data)
c.close()
u = resource.getrusage(resource.RUSAGE_SELF); print(u.ru_utime + u.ru_stime - before, flush=True)
"""


def _kernel_s() -> float:
    """CPU seconds this machine has spent on network work outside any process since boot: hard and soft
    interrupts (``/proc/stat``) and the ``ksoftirqd`` threads that take over soft interrupts under load."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    total = fields[5] + fields[6]  # irq, softirq
    for task in os.listdir("/proc"):
        if not task.isdigit():
            continue
        try:
            if open(f"/proc/{task}/comm").read().startswith("ksoftirqd"):
                stat = open(f"/proc/{task}/stat").read().rsplit(")", 1)[1].split()
                total += int(stat[11]) + int(stat[12])  # utime, stime
        except OSError:  # the task ended meanwhile
            continue
    return total / tick


def measure(hosts: Sequence[str], nbytes: int = 64 * _CHUNK, repeats: int = 3, timeout_s: float = 120.0) -> float:
    """CPU seconds per byte moved from ``hosts[0]`` to ``hosts[1]`` (namespaces of ``benchmarks/netns/hosts.sh``,
    addresses 10.77.0.1, .2, ...): the sender's and the receiver's CPU time (their system calls included)
    plus the interrupts' and ``ksoftirqd``'s over the transfer, the median of ``repeats`` transfers. Raises
    ``RuntimeError`` when a transfer fails or outlasts ``timeout_s``."""
    if len(hosts) < 2:
        raise ValueError(f"measure needs two hosts, got {list(hosts)}")
    return statistics.median(_transfer(hosts[0], hosts[1], max(1, nbytes // _CHUNK), timeout_s)
                             for _ in range(max(1, repeats)))


def _transfer(sender: str, receiver: str, chunks: int, timeout_s: float) -> float:
    address = f"10.77.0.{receiver.rsplit('h', 1)[1]}"

    def start(host: str, code: str, *args: str) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", host, sys.executable, "-c", code, *args],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    server = start(receiver, _SERVER, address, str(_PORT))
    client = None
    try:
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"benchmarks.network_cpu: the receiver on {receiver} did not start: {server.stderr.read()}")
        client = start(sender, _CLIENT, address, str(_PORT), str(chunks))
        time.sleep(0.5)  # its interpreter started and connected: not part of the window
        kernel = _kernel_s()
        client.stdin.write("go\n")
        client.stdin.flush()
        out, err = server.communicate(timeout=timeout_s)
        kernel = _kernel_s() - kernel
        sent, client_err = client.communicate(timeout=10)
        received = out.split()
        if len(received) != 2 or int(received[0]) != chunks * _CHUNK or not sent.strip():
            raise RuntimeError(f"benchmarks.network_cpu: {receiver} received {received[:1] or 'nothing'} of "
                               f"{chunks * _CHUNK} bytes from {sender}: {err or client_err}")
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"benchmarks.network_cpu: the transfer from {sender} to {receiver} took over "
                           f"{timeout_s:.0f} s") from None
    finally:
        for proc in (server, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
    return (float(received[1]) + float(sent) + kernel) / (chunks * _CHUNK)


def main(argv: list[str] | None = None) -> float:
    from benchmarks.launch import netns_link

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="100mbit", help="the link's rate, as benchmarks.scale's --rate")
    parser.add_argument("--megabytes", type=int, default=64)
    args = parser.parse_args(argv)
    with netns_link(2, args.rate, "0ms") as hosts:
        per_byte = measure(hosts, args.megabytes * _CHUNK)
    print(f"{per_byte * 1e9:.2f} ns of CPU per byte moved between two emulated hosts ({args.rate})")
    return per_byte


if __name__ == "__main__":
    main()
