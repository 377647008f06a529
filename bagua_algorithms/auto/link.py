"""Link figures for ``algorithm="auto"``'s log: latency and bandwidth of timed allreduces.

Communicated (every rank, on the caller's thread: call it where collectives are in order, e.g. on
the group's communication thread): 1 untimed + 5 timed allreduces of one float64 (latency: the fastest),
then 1 untimed + 3 timed allreduces of ``large_bytes`` of float32 (``auto``: the model's bytes, between
64 KiB and 4 MiB; the fastest of them) and one allreduce (MAX) of the two times, so that every rank reads
the same figures. Bandwidth: the bus bandwidth of a ring allreduce (``2 (n - 1) / n`` times the buffer per
rank) over the large allreduce's time less the latency. When the latency is more than half of that time
(a fast link, such as loopback, and a small model), the difference says nothing: the buffer is made 4
times larger, up to ``max_bytes``, and measured again (the ranks agree on it, since they read the same
times); if the latency still dominates, the bandwidth is ``None``: too fast to measure with this buffer.

Example::

    >>> measure_link(group.get_global_communicator())
    {'latency_s': 0.00021, 'bandwidth_bytes_per_s': 117000000.0, 'measured_bytes': 4194304}
"""

from __future__ import annotations

import time

import torch

from bagua_core.api import BaguaCommunicator, ReduceOp, allreduce_inplace

__all__ = ["measure_link", "bandwidth_of", "describe_bandwidth"]


def _timed(tensor: torch.Tensor, comm: BaguaCommunicator, repeats: int) -> float:
    """The fastest of ``repeats`` allreduces of ``tensor`` (after one untimed): the least disturbed by a
    loaded machine."""
    allreduce_inplace(tensor, op=ReduceOp.SUM, comm=comm)  # untimed: connections, allocations
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        allreduce_inplace(tensor, op=ReduceOp.SUM, comm=comm)
        if tensor.is_cuda:
            torch.cuda.synchronize(tensor.device)
        times.append(time.perf_counter() - started)
    return min(times)


def bandwidth_of(moved_bytes: float, seconds: float, latency_s: float) -> float | None:
    """Bytes per second of the transfer (``seconds`` less the latency), or None when the latency is more
    than half of ``seconds``: the difference of two noisy times that close is no measurement."""
    transfer = seconds - latency_s
    if seconds <= 0 or transfer < 0.5 * seconds:
        return None
    return moved_bytes / transfer


def measure_link(comm: BaguaCommunicator, large_bytes: int = 4 << 20, device: torch.device | str = "cpu",
                 max_bytes: int = 16 << 20) -> dict[str, float | int | None]:
    """``{"latency_s", "bandwidth_bytes_per_s", "measured_bytes"}`` measured over ``comm`` with tensors on
    ``device`` (collective; ``bandwidth_bytes_per_s`` is None when the link is too fast to measure with
    buffers up to ``max_bytes``)."""
    n = max(comm.nranks(), 1)
    latency = _timed(torch.zeros(1, dtype=torch.float64, device=device), comm, 5)
    if n == 1:  # nothing crosses a link
        return {"latency_s": latency, "bandwidth_bytes_per_s": None, "measured_bytes": 0}
    size = max(int(large_bytes), 4)
    while True:
        seconds = _timed(torch.zeros(size // 4, dtype=torch.float32, device=device), comm, 3)
        agreed = torch.tensor([latency, seconds], dtype=torch.float64, device=device)
        allreduce_inplace(agreed, op=ReduceOp.MAX, comm=comm)  # the same figures, so the same decision everywhere
        latency_max, seconds_max = (float(v) for v in agreed.cpu())
        bandwidth = bandwidth_of(2 * (n - 1) / n * size, seconds_max, latency_max)
        if bandwidth is not None or size >= max_bytes:
            return {"latency_s": latency_max, "bandwidth_bytes_per_s": bandwidth, "measured_bytes": size}
        size = min(size * 4, max_bytes)


def describe_bandwidth(link: dict) -> str:
    """``link``'s bandwidth for a log line: ``117.0 MB/s``, or why there is none."""
    bandwidth = link.get("bandwidth_bytes_per_s")
    if bandwidth is None:
        measured = link.get("measured_bytes") or 0
        return f"too fast to measure with {measured / 2**20:.0f} MiB" if measured else "none (one rank)"
    return f"{bandwidth / 1e6:.1f} MB/s"
