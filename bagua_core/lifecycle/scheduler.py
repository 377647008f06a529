"""Launches ready buckets strictly in registration order on the group's communication thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from bagua_core.lifecycle import proxies

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.lifecycle.bucket import BaguaBucket
    from bagua_core.runtime.communication.worker import CommunicationWorker

__all__ = ["BucketScheduler"]


class BucketScheduler:
    """Bucket i is launched once it is ready and buckets 0..i-1 have been launched.

    ``ready_hook`` (the impl's ``init_bucket_ready_hook``): called with each bucket as it is launched,
    in bucket order, on the thread that made it ready (autograd's during backward, the training
    thread's at the end of backward), before its operations are handed to the communication thread."""

    def __init__(self, buckets: list[BaguaBucket], worker: CommunicationWorker,
                 ready_hook: Callable[[BaguaBucket], None] | None = None) -> None:
        self.buckets = buckets
        self.worker = worker
        self.ready_hook = ready_hook
        self.next_index = 0
        self.in_backward = False
        """Set by the module's backward hooks: the last bucket then runs on the calling thread, which
        would only wait for it at the end of backward anyway (no hand-off to the communication thread)."""
        for bucket in buckets:
            bucket.on_ready = self._on_ready

    def _on_ready(self, bucket: BaguaBucket) -> None:
        while self.next_index < len(self.buckets) and self.buckets[self.next_index].is_ready():
            launching = self.buckets[self.next_index]
            self.next_index += 1
            launching.reset_ready()
            if self.ready_hook is not None:
                self.ready_hook(launching)
            if not launching.has_ops():  # nothing to hand to the communication thread
                continue
            if self.in_backward and self.next_index == len(self.buckets):
                self.worker.synchronize()  # earlier buckets first: the order of collectives is kept
                launching.execute_ops(True)
            else:
                self.worker.submit(launching.execute_ops, True)

    def flush(self) -> None:
        """Mark what was never marked ready (unused parameters get zero gradients) and launch it."""
        while self.next_index < len(self.buckets):
            bucket = self.buckets[self.next_index]
            if not bucket.pending_tensors():
                self._on_ready(bucket)
                continue
            for tensor in bucket.pending_tensors():
                if proxies.effective(tensor) is None:
                    proxies.ensure_grad(tensor)
                bucket.mark_ready(tensor)

    def synchronize(self) -> None:
        """Wait for every launched bucket, including the communication its last op left in flight."""
        try:
            self.worker.synchronize()
        finally:
            first_error: BaseException | None = None
            for bucket in self.buckets:
                try:
                    bucket.complete_deferred()
                    bucket.wait_communication()
                except BaseException as exc:  # every bucket is still completed; the first error is raised
                    first_error = first_error or exc
            if first_error is not None:
                raise first_error

    def wait(self) -> None:
        """Launch what is left, wait for all of it, and start the next iteration from bucket 0."""
        try:
            self.flush()
            self.synchronize()
        finally:
            self.next_index = 0
            for bucket in self.buckets:
                bucket.reset_ready()

    def detach(self) -> None:
        for bucket in self.buckets:
            bucket.on_ready = None
