"""The userspace delay link of the benchmarks (``benchmarks/delay_link.py``): a real link between two
network namespaces whose round-trip time is twice the delay and whose rate is the tbf's. Needs root,
``/dev/net/tun`` and ``ip``; skipped where any is missing."""

from __future__ import annotations

import os
import shutil

import pytest

from benchmarks.delay_link import delay_link, measure, parse_delay


def test_parse_delay() -> None:
    assert parse_delay("5ms") == pytest.approx(0.005)
    assert parse_delay("250us") == pytest.approx(0.00025)
    assert parse_delay("0.01s") == pytest.approx(0.01)
    with pytest.raises(ValueError, match="delay must look like 5ms"):
        parse_delay("5 parsecs")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun") or shutil.which("ip") is None,
                    reason="needs root, /dev/net/tun and iproute2")
def test_link_adds_the_delay_and_keeps_the_rate() -> None:
    # 50 Mbit/s, not more: the suite runs 8 workers on 2 cores, and the forwarder (a Python process) starved of
    # CPU carried 95 Mbit/s of a 200 Mbit/s link there; the benchmarks' own runs have the machine to themselves
    with delay_link(2, "50mbit", "15ms") as hosts:
        rtt, mbits = measure(hosts, mebibytes=8)
    assert 0.030 <= rtt < 0.045, rtt  # 2 x 15 ms, plus the forwarder's scheduling
    assert 37 < mbits <= 53, mbits  # tbf's 50 Mbit/s, less TCP's ramp-up over a 30 ms RTT
