"""Small tensor helpers the original exposed in ``bagua.torch_api.utils`` (flattening, a flattened
collective call, a time-weighted running average). Only code written for the original uses them, so
they live in the compatibility package, not in the core.

Example::

    >>> flat = flatten([torch.ones(2), torch.zeros(3)])      # one contiguous tensor of 5 elements
    >>> apply_flattened_call([t1, t2], torch.distributed.all_reduce)   # one allreduce, then the average
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

__all__ = [
    "StatisticalAverage",
    "apply_flattened_call",
    "apply_flattened_call_all",
    "check_contiguous",
    "flatten",
    "get_flattened_tensor",
    "unflatten",
]

def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One new contiguous 1-D tensor holding ``tensors`` in order.

    >>> flatten([torch.ones(2), torch.zeros(1, 2)]).tolist()
    [1.0, 1.0, 0.0, 0.0]
    """
    return torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.empty(0)


def unflatten(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Views of ``flat`` shaped like ``tensors``.

    >>> [t.shape for t in unflatten(torch.arange(4.0), [torch.ones(1), torch.ones(3, 1)])]
    [torch.Size([1]), torch.Size([3, 1])]
    """
    return tuple(part.view_as(t) for part, t in zip(flat.split([t.numel() for t in tensors]), tensors))


def apply_flattened_call(bucket: Sequence[torch.Tensor], call: Callable, extra_args: Sequence | None = None) -> None:
    """Run ``call(flat, *extra_args)`` on the flattened ``bucket`` and copy the result back into its
    tensors; after ``torch.distributed.all_reduce`` the result is divided by the world size (an average)."""
    coalesced = flatten(list(bucket))
    call(coalesced, *(extra_args or ()))
    if call is dist.all_reduce:
        coalesced /= dist.get_world_size()
    for buf, synced in zip(bucket, unflatten(coalesced, list(bucket))):
        buf.copy_(synced)


def apply_flattened_call_all(tensors: Sequence[torch.Tensor], call: Callable) -> None:
    """:func:`apply_flattened_call` once per tensor type (dtype and device) of ``tensors``."""
    groups: OrderedDict[str, list[torch.Tensor]] = OrderedDict()
    for tensor in tensors:
        groups.setdefault(tensor.type(), []).append(tensor)
    for group in groups.values():
        apply_flattened_call(group, call)


def check_contiguous(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether each tensor starts in memory where the previous one ends."""
    end = None
    for tensor in tensors:
        if end is not None and tensor.data_ptr() != end:
            return False
        end = tensor.data_ptr() + tensor.numel() * tensor.element_size()
    return True


def get_flattened_tensor(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """A new 1-D tensor holding a copy of ``tensors`` in order (None for no tensors)."""
    if not tensors:
        return None
    with torch.no_grad():
        return torch.cat([t.reshape(-1) for t in tensors])


class StatisticalAverage:
    """A running average over time: ``records[i]`` is the average over the 2**i seconds before
    ``last_update_time``, ``record_tail`` = (seconds, average) beyond the last record; ``get(n)`` is the
    average over the last ``n`` seconds (interpolated). The original's, with its defaults evaluated per
    instance (the original shared one list between instances) and ``get`` returning the tail's average
    (not its length) when there are no records.

    Example::

        >>> speed = StatisticalAverage()
        >>> speed.record(2.0); speed.get(10.0)
        2.0
    """

    def __init__(self, last_update_time: float | None = None, records: list[float] | None = None,
                 record_tail: tuple[float, float] = (0.0, 0.0)) -> None:
        self.last_update_time = time.time() if last_update_time is None else last_update_time
        self.records: list[float] = [] if records is None else list(records)
        self.record_tail = record_tail

    def record_seconds(self) -> float:
        return 2.0 ** (len(self.records) - 1) if self.records else 0.0

    def total_recording_time(self) -> float:
        return self.record_seconds() + self.record_tail[0]

    def get_records_mean(self, last_n_seconds: float) -> float:
        if last_n_seconds <= 0.0:
            return 0.0
        records_seconds = self.record_seconds()
        tail_seconds, tail_mean = self.record_tail
        if not self.records:
            return tail_mean
        if last_n_seconds < 1.0:
            return self.records[0]
        if last_n_seconds <= records_seconds:
            floor_id = max(0, math.floor(math.log(last_n_seconds, 2.0)))
            floor_time = 2.0 ** floor_id
            if floor_id + 1 < len(self.records):
                a, b = self.records[floor_id], self.records[floor_id + 1]
                return a + (b - a) * (last_n_seconds - floor_time) / floor_time
            return self.records[floor_id]
        if last_n_seconds <= records_seconds + tail_seconds:
            a, b = self.records[-1], tail_mean
            return a + (b - a) * (last_n_seconds - records_seconds) / tail_seconds
        return tail_mean

    def record(self, val: float) -> None:
        now = time.time()
        time_dist = now - self.last_update_time
        new_records: list[float] = []
        new_tail = (0.0, 0.0)
        for i in range(64):
            period = 2.0**i
            if period <= time_dist:
                new_records.append(val)
            elif period <= time_dist + self.total_recording_time():
                share = time_dist / period
                new_records.append(val * share + self.get_records_mean(period - time_dist) * (1.0 - share))
            else:
                total = time_dist + self.total_recording_time()
                share = time_dist / total if total else 1.0
                tail_len = total - 2.0 ** (len(new_records) - 1)
                new_tail = (tail_len, val * share + self.get_records_mean(self.total_recording_time()) * (1.0 - share))
                break
        self.last_update_time = now
        self.records = new_records
        self.record_tail = new_tail

    def get(self, last_n_seconds: float) -> float:
        time_dist = time.time() - self.last_update_time
        if last_n_seconds <= time_dist:
            return self.records[0] if self.records else self.record_tail[1]
        return self.get_records_mean(last_n_seconds - time_dist)

    def __str__(self) -> str:
        return str({"last_update_time": self.last_update_time, "records": self.records, "record_tail": self.record_tail})
