"""CUDA stream order between the threads that produce tensors and the bucket communication.

Marking a CUDA tensor ready notes the stream that is current at that moment (the stream that
produced the gradient: the default stream, a user's stream), and an event is recorded on each noted
stream when the bucket is ready; a bucket's
operations run on a communication stream of the process group's worker that first waits for those
events, and the training thread waits for the bucket's "done" event before it uses the results.
So a collective never reads a gradient before it is written, and an optimizer never reads a
gradient before the collective wrote it, whatever streams are involved, and the device never
blocks the host. ``bagua_mark_communication_ready_without_synchronization`` skips the event (the
caller guarantees the order). CPU tensors need none of this: every function here is a no-op for them.

Example::

    >>> events = ReadyEvents()
    >>> events.note(torch.device("cuda", 0))        # when a tensor is marked ready
    >>> events.record()                            # when its bucket is ready
    >>> with run_on(stream, events) as done:       # the bucket's ops, on the communication stream
    ...     ...
    >>> wait_for(done)                             # the training thread, before using the results
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["ReadyEvents", "run_on", "wait_for", "new_stream"]


def new_stream(device: torch.device) -> torch.cuda.Stream:
    """A communication stream on ``device`` (normal priority)."""
    return torch.cuda.Stream(device=device)


class ReadyEvents:
    """The streams that produced a bucket's tensors since its operations last ran, and the events
    recorded on them when the bucket became ready (one per stream: an event recorded then covers all
    the work queued on that stream before, so tensors need no event of their own)."""

    def __init__(self) -> None:
        self._noted: set[int] = set()  # raw stream handles (a cheap query: this runs for every tensor)
        self._streams: dict[int, tuple[torch.cuda.Stream, torch.cuda.Event]] = {}  # reused per stream
        self._recorded: list[torch.cuda.Event] = []

    def note(self, device: torch.device) -> None:
        """A tensor was marked ready: remember the current stream (the producer's)."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        stream = torch.cuda.current_stream(index)
        raw = stream.cuda_stream
        if raw not in self._streams:
            self._streams[raw] = (stream, torch.cuda.Event())
        self._noted.add(raw)

    def record(self) -> None:
        """The bucket is ready: record an event on every noted stream."""
        for raw in self._noted:
            stream, event = self._streams[raw]
            event.record(stream)
            self._recorded.append(event)
        self._noted.clear()

    def take(self) -> list[torch.cuda.Event]:
        recorded, self._recorded = self._recorded, []
        return recorded


@contextlib.contextmanager
def run_on(stream: torch.cuda.Stream | None, events: ReadyEvents) -> Iterator[torch.cuda.Event | None]:
    """Run the body on ``stream`` after the recorded events; yields the event the body's work will
    have completed at (recorded on exit), or None when ``stream`` is None (CPU)."""
    if stream is None:
        yield None
        return
    for event in events.take():
        stream.wait_event(event)
    done = torch.cuda.Event()
    with torch.cuda.stream(stream):
        try:
            yield done
        finally:
            done.record(stream)


def wait_for(done: torch.cuda.Event | None) -> None:
    """Make the calling thread's current stream wait for ``done`` (no host synchronisation)."""
    if done is not None:
        torch.cuda.current_stream().wait_event(done)
