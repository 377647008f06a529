"""The torch process group the algorithms' collectives use between replicas in fault-tolerant mode.

torchft's ``ProcessGroupGloo`` is reconfigured by the ``Manager`` whenever the quorum changes: it then
holds a fresh gloo group over the quorum's replicas. :class:`ManagedGroup` wraps that gloo group for one
quorum so that bagua's unchanged collectives (``torch.distributed`` calls with ``group=``) run on it:

- torch never made it, so torch's group tables do not hold it, and it is used through torch's public API
  only: the collectives name a peer by its rank in the group (``group_dst=`` / ``group_src=``, which torch
  hands to the group as it is), and bagua asks the group itself for its rank, size and backend
  (``rank()``, ``size()``, ``name()``: :mod:`bagua_core.runtime.torch_groups`). What looks a
  group up in torch's tables (``dist.get_rank(group)``, ``get_group_rank``, ``get_global_rank``,
  ``get_process_group_ranks``, ``dist.get_backend(group)``, a global ``dst``/``src``, ``dist.recv``'s
  returned sender) fails on it. So does torch's logging of an exception raised inside one of its collectives
  on it (``c10d_logger`` asks ``get_backend``): that exception arrives as a ``ValueError`` with the original
  as its context; an error of the gloo group itself never does (below);
- its members also have global ranks, for bagua's own bookkeeping only (``BaguaCommunicator``'s
  ``global_ranks``, ``QuorumGroup.ranks``; torch never sees them): this process keeps its own rank
  (``dist.get_rank()``, its rank inside its replica) and member ``j`` of the quorum is
  ``VIRTUAL_RANK_BASE + j`` (:func:`virtual_ranks`);
- an error (a peer killed, a timeout) never escapes: it is handed to ``on_error`` (the Manager's
  ``report_error``, which makes ``should_commit`` refuse the step) and the operation completes with its
  buffers as they are; every later operation of the same quorum completes at once, so a step whose
  participant failed runs to its end quickly and is then committed nowhere;
- on that error the group lets go of its gloo group at once (:meth:`ManagedGroup.release`): the operations
  still in flight are abandoned, not waited for, and the last reference goes, which closes its connections.
  A surviving peer waiting for a message this replica will now never send (it left the exchange when it saw
  the dead one) then fails at once ("connection closed") instead of after the timeout: with three replicas
  and one killed, both survivors used to wait the whole timeout for each other.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["ManagedGroup", "VIRTUAL_RANK_BASE", "virtual_ranks"]

VIRTUAL_RANK_BASE = 1 << 20
"""bagua's global rank for member ``j`` of the quorum (other than this process); no torch table holds it."""

_FORWARDED = ("allreduce", "allreduce_coalesced", "broadcast", "allgather", "all_gather_single", "alltoall",
              "all_to_all_single", "reduce", "gather", "scatter", "reduce_scatter", "reduce_scatter_single", "send",
              "recv", "barrier", "alltoall_base")
"""The operations torch.distributed's functions call on a group (torch 2.13's names), run on the gloo group."""


def virtual_ranks(replica_rank: int, replica_world_size: int) -> list[int]:
    """bagua's global ranks of the quorum's members in group-rank order (this process: its own rank)."""
    me = dist.get_rank()
    return [me if j == replica_rank else VIRTUAL_RANK_BASE + j for j in range(replica_world_size)]


class _DoneWork(dist.Work):
    """A completed operation (after an error: its buffers hold whatever they held)."""

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self) -> Any:
        return None

    def get_future(self) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()
        future.set_result([])
        return future


class _SwallowingWork(_DoneWork):
    def __init__(self, work: Any, group: ManagedGroup) -> None:
        super().__init__()
        self._work, self._group = work, group
        self._futures: list[torch.futures.Future] = []

    def get_future(self) -> torch.futures.Future:
        """A future completed when the operation is (with its result: e.g. the reduced tensors); at once if it
        was waited for already or abandoned. An error completes it with ``[]`` and fails the group, as a
        wait does; when the group is released, a future still pending completes with ``[]`` at once."""
        if self._work is None:
            return super().get_future()
        future: torch.futures.Future = torch.futures.Future()
        self._futures.append(future)

        def settle(inner: torch.futures.Future) -> None:
            try:
                value = inner.value()
            except Exception as exc:  # a peer died or hung; gloo's thread runs this: fail the group off it
                threading.Thread(target=self._group.fail, args=(exc,), name="bagua-managed-group-fail",
                                 daemon=True).start()
                value = []
            _settle(future, value)

        self._work.get_future().add_done_callback(settle)
        return future

    def abandon(self) -> None:
        """The group failed: waits return at once, and so do the futures handed out."""
        self._work = None
        for future in self._futures:
            _settle(future, [])

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._work is None:  # waited, or abandoned when the group failed
            return True
        work, self._work = self._work, None
        self._group._in_flight.discard(self)
        error = None
        try:
            work.wait()
        except Exception as exc:  # a peer died or hung: the step fails, this thread goes on
            error = exc
        del work  # the error's traceback keeps this frame: it must not keep the gloo group alive (release)
        if error is not None:
            self._group.fail(error)
        return True

    def is_completed(self) -> bool:
        return self._work is None or self._work.is_completed()


def _settle(future: torch.futures.Future, value: Any) -> None:
    """Complete ``future`` with ``value`` unless it completed already (gloo's callback and a release race)."""
    try:
        future.set_result(value)
    except RuntimeError:  # already completed
        pass


class ManagedGroup(dist.ProcessGroup):
    """One quorum's gloo group among the replicas, errors reported instead of raised (module doc)."""

    def __init__(self, inner: dist.ProcessGroup, replica_rank: int, replica_world_size: int, name: str,
                 on_error: Callable[[Exception], None]) -> None:
        super().__init__(replica_rank, replica_world_size)
        self._inner = inner
        self._name = name
        self._on_error = on_error
        self.error: Exception | None = None
        """The first error of an operation of this quorum (then nothing more runs on it)."""
        self._in_flight: weakref.WeakSet[_SwallowingWork] = weakref.WeakSet()
        """Operations not waited for yet (weakly: one its caller dropped unwaited is not kept)."""
        self.ranks = virtual_ranks(replica_rank, replica_world_size)
        """bagua's global rank of each member, by group rank (module doc): bookkeeping, never handed to torch."""
        for method in _FORWARDED:
            setattr(self, method, self._forwarder(method))

    def fail(self, exc: Exception) -> None:
        if self.error is None:
            self.error = exc
            self.release()
            self._on_error(exc)

    def release(self) -> None:
        """Let go of the gloo group: the operations in flight are abandoned (their waits return at once) and
        this group's reference to it goes. Once the last one goes (``on_error`` drops torchft's), gloo closes
        its connections and the peers still waiting on this replica fail at once (module doc)."""
        for work in list(self._in_flight):
            work.abandon()
        self._in_flight.clear()
        self._inner = None

    def _forwarder(self, method: str) -> Callable[..., dist.Work]:
        def run(*args: Any, **kwargs: Any) -> dist.Work:  # torch passes some by name (barrier's opts=)
            if self.error is not None:
                return _DoneWork()
            try:
                work = _SwallowingWork(getattr(self._inner, method)(*args, **kwargs), self)
            except Exception as exc:
                self.fail(exc)
                return _DoneWork()
            self._in_flight.add(work)
            return work

        return run

    def name(self) -> str:
        """The backend's name, as ``ProcessGroup.name()`` gives it (``torch_groups.backend_of`` asks it)."""
        return "gloo"

    def getBackendName(self) -> str:  # noqa: N802 (the C++ method behind name(): torch's own calls of it)
        return "gloo"

    @property
    def group_name(self) -> str:  # type: ignore[override]
        return self._name

    def __repr__(self) -> str:
        return f"ManagedGroup({self._name!r}, rank={self.rank()}, size={self.size()})"
