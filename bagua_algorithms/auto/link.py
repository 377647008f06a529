"""Link figures for ``algorithm="auto"``'s log: latency and bandwidth of timed allreduces.

Communicated (every rank, on the caller's thread: call it where collectives are in order, e.g. on
the group's communication thread): 1 untimed + 5 timed allreduces of one float64 (latency: their
median) and 1 untimed + 2 timed allreduces of ``large_bytes`` of float32 (``auto``: the model's
bytes, between 64 KiB and 4 MiB) (bandwidth: bytes over the
median time, the bus bandwidth of a ring allreduce, ``2 (n - 1) / n`` times the buffer per rank).

Example::

    >>> measure_link(group.get_global_communicator())
    {'latency_s': 0.00021, 'bandwidth_bytes_per_s': 117000000.0}
"""

from __future__ import annotations

import statistics
import time

import torch

from bagua_core.api import BaguaCommunicator, ReduceOp, allreduce_inplace

__all__ = ["measure_link"]


def _timed(tensor: torch.Tensor, comm: BaguaCommunicator, repeats: int) -> float:
    allreduce_inplace(tensor, op=ReduceOp.SUM, comm=comm)  # untimed: connections, allocations
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        allreduce_inplace(tensor, op=ReduceOp.SUM, comm=comm)
        if tensor.is_cuda:
            torch.cuda.synchronize(tensor.device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_link(comm: BaguaCommunicator, large_bytes: int = 4 << 20,
                 device: torch.device | str = "cpu") -> dict[str, float]:
    """``{"latency_s", "bandwidth_bytes_per_s"}`` measured over ``comm`` with tensors on ``device``
    (collective)."""
    latency = _timed(torch.zeros(1, dtype=torch.float64, device=device), comm, 5)
    n = max(comm.nranks(), 1)
    seconds = _timed(torch.zeros(large_bytes // 4, dtype=torch.float32, device=device), comm, 2)
    moved = 2 * (n - 1) / n * large_bytes
    return {"latency_s": latency, "bandwidth_bytes_per_s": moved / max(seconds - latency, 1e-9)}
