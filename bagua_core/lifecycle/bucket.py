"""``BaguaBucket``: tensors communicated together, optionally flattened into one buffer.

A bucket runs its operations, in order, once all its tensors are ready; buckets launch in registration order
on the communication thread, overlapping the rest of backward. Over an FSDP2-sharded model the values live in
the buffer FSDP2 allocates each step (its padded reduce-scatter output), lent to the bucket
(:meth:`BaguaBucket.lend`) and worked on in place; :attr:`BaguaBucket.offsets` is FSDP2's layout either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from collections.abc import Callable

import torch

from bagua_core.lifecycle import proxies
from bagua_core.lifecycle.state import tensor_state_of
from bagua_core.lifecycle.tensor import local_shard
from bagua_core.runtime.communication import streams

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.runtime.process_group import BaguaProcessGroup

__all__ = ["BaguaBucket"]

BucketOp = Callable[["BaguaBucket"], None]


class BaguaBucket:
    """Example::

    >>> from bagua_core.lifecycle.bucket_ops.centralized import CentralizedSynchronousOp
    >>> bucket = BaguaBucket([p1, p2], "bucket_0", flatten=True)
    >>> bucket.append_op(CentralizedSynchronousOp(hierarchical=False, average=True))
    """

    BIND_MAX_MEAN_BYTES = 64 * 1024
    """:meth:`bind_unset_views` binds only buckets whose tensors average at most this size: for larger
    tensors zeroing the slot and accumulating into it costs more than autograd's fresh gradient and
    one copy (measured on the 21M MLP: +1 ms a step); for small ones the per-tensor copies cost more."""

    def __init__(self, tensors: list[torch.Tensor], name: str, flatten: bool, alignment: int = 1) -> None:
        if not tensors:
            raise ValueError(f"bucket {name!r} needs at least one tensor")
        if not isinstance(alignment, int) or alignment < 1:
            raise ValueError(f"alignment must be a positive integer, got {alignment!r}")
        for tensor in tensors:
            if not proxies.is_marked(tensor):
                raise ValueError(f"bucket {name!r}: every tensor must be a bagua tensor (mark it with "
                                 f"bagua_core.api.tensors.mark)")
        self.tensors = list(tensors)
        self.name = name
        self.flatten = flatten
        self.alignment = alignment
        self._ops: list[BucketOp] = []
        self._deferred: list[Callable[[], None]] = []
        self._deferring = False
        self._ready: set[int] = set()
        self._ready_events = streams.ReadyEvents()  # CUDA: the producing streams' events
        self._done_event: torch.cuda.Event | None = None  # CUDA: the last execution's completion
        self.on_ready: Callable[[BaguaBucket], None] | None = None
        self.process_group: BaguaProcessGroup | None = None
        self.backend_bucket = self  # the original's ops take ``bucket.backend_bucket``: here the bucket itself
        self.bagua_module_name = proxies.module_name_of(tensors[0])
        # a sharded parameter's gradient before its first backward: laid out as the parameter's shard
        effective = [_or_shard(proxies.effective(t), t) for t in self.tensors]
        self.dtype, self.device = effective[0].dtype, effective[0].device
        for tensor in effective:
            if flatten and (tensor.dtype != self.dtype or tensor.device != self.device):
                raise ValueError(
                    f"bucket {name!r} cannot be flattened: it mixes {self.dtype}/{self.device} with "
                    f"{tensor.dtype}/{tensor.device}"
                )
        self.numels = [t.numel() for t in effective]
        self._shapes = [tuple(t.shape) for t in effective]
        self.offsets = [sum(self.numels[:i]) for i in range(len(self.numels))]
        total = sum(self.numels)
        self.padded_numel = -(-total // alignment) * alignment
        self.padding = self.padded_numel - total
        self._buffer: torch.Tensor | None = None
        self._lent: torch.Tensor | None = None  # this step's buffer, lent by the core (sharded models)
        self._gapped = False  # the offsets leave room after some tensors (FSDP2's padded shards)
        for tensor in self.tensors:
            tensor_state_of(tensor).bucket = self  # every tensor is a bagua tensor (checked above)
        self._index = {id(tensor): i for i, tensor in enumerate(self.tensors)}
        self._views: list[torch.Tensor] = []  # per tensor: its slot of the buffer, in its shape and layout
        # A flattened bucket keeps each tensor's memory layout (channels_last stays channels_last, as DDP's
        # bucket views do): a gradient slot laid out unlike its parameter makes autograd copy it every step.
        self.strides: list[tuple[int, ...]] = [_dense_strides(e) for e in effective] if flatten else \
            [_contiguous_strides(e.shape) for e in effective]
        if flatten:
            self._buffer = torch.zeros(self.padded_numel, dtype=self.dtype, device=self.device)
            for tensor, offset in zip(self.tensors, self.offsets):
                proxies.set_storage(tensor, self._buffer.untyped_storage(), offset)
            self._views = [self.slot_of(self._buffer, i) for i in range(len(effective))]
        self._binds_views = flatten and self.bytes() <= self.BIND_MAX_MEAN_BYTES * len(self.tensors)

    # --- layout -----------------------------------------------------------------------------
    def _slot(self, index: int) -> torch.Tensor:
        assert self._buffer is not None
        offset, numel = self.offsets[index], self.numels[index]
        return self._buffer[offset : offset + numel]

    def expect_lent_buffer(self, offsets: list[int], numel: int) -> None:
        """Lay the bucket out as the buffer that will be lent to it each step (:meth:`lend`): tensor ``i`` at
        ``offsets[i]`` of ``numel`` elements. For a bucket that is not flattened (FSDP2 owns the storage); until
        a buffer is lent, :meth:`flattened_view` gathers the tensors in this layout (zeros in between)."""
        if self.flatten:
            raise ValueError(f"bucket {self.name!r} is flattened into a buffer of its own; a lent one replaces none")
        if len(offsets) != len(self.tensors) or any(o < 0 or o + n > numel for o, n in zip(offsets, self.numels)):
            raise ValueError(f"bucket {self.name!r}: offsets {offsets} do not place {self.numels} in {numel} elements")
        self.offsets = list(offsets)
        self.padded_numel = numel
        self.padding = numel - sum(self.numels)
        self._gapped = True

    def lend(self, flat: torch.Tensor | None) -> None:
        """Make ``flat`` (laid out as :meth:`expect_lent_buffer` said) the bucket's buffer until the next call;
        None takes it back. The operations then work on it in place."""
        if flat is not None and (flat.numel() != self.padded_numel or flat.dtype != self.dtype):
            raise ValueError(f"bucket {self.name!r} expects {self.padded_numel} {self.dtype} values, got "
                             f"{flat.numel()} {flat.dtype}")
        self._lent = flat

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """The shape of each effective tensor, as the bucket was built."""
        return list(self._shapes)

    def slot_of(self, flat: torch.Tensor, index: int) -> torch.Tensor:
        """Tensor ``index``'s place in ``flat`` (laid out as :attr:`buffer` / :meth:`flattened_tensor`), as a
        view in the tensor's shape and memory layout."""
        piece = flat[self.offsets[index] : self.offsets[index] + self.numels[index]]
        return piece.as_strided(self._shapes[index], self.strides[index])

    @property
    def buffer(self) -> torch.Tensor | None:
        """The contiguous buffer of a flattened bucket (padding included), or the buffer lent to it for this
        step (:meth:`lend`); None otherwise."""
        return self._buffer if self._buffer is not None else self._lent

    def check_flatten(self) -> bool:
        """True when every effective tensor is a view of its place in the bucket buffer, in its slot's layout
        (and while a buffer is lent: the values are there, the tensors become its views)."""
        if self._lent is not None:
            return True
        if self._buffer is None:
            return False
        base = self._buffer.data_ptr()
        itemsize = self._buffer.element_size()
        for tensor, offset, view in zip(self.tensors, self.offsets, self._views):
            effective = proxies.effective(tensor)
            if effective is view:  # the common case: the slot itself
                continue
            if effective is None or effective.stride() != view.stride() or effective.shape != view.shape:
                return False
            if effective.data_ptr() != base + offset * itemsize:
                return False
        return True

    def flattened_tensor(self) -> torch.Tensor:
        """A new contiguous tensor holding a copy of the effective tensors (and padding) in order, as
        the original's (algorithms create their replicas with it); it does not require grad. The
        flattened bucket's own storage is :attr:`buffer`."""
        with torch.no_grad():
            if self.check_flatten():
                return self.buffer.clone()
            if self._buffer is None and not self._gapped:
                pieces = [proxies.effective(t).reshape(-1) for t in self.tensors]
                if self.padding:
                    pieces.append(torch.zeros(self.padding, dtype=self.dtype, device=self.device))
                return torch.cat(pieces)
            flat = torch.zeros(self.padded_numel, dtype=self.dtype, device=self.device)
            for index, tensor in enumerate(self.tensors):
                self.slot_of(flat, index).copy_(proxies.effective(tensor))
            return flat

    def flattened_view(self) -> torch.Tensor:
        """:attr:`buffer` itself when the effective tensors are views of it (writing it writes them), else
        a new tensor as :meth:`flattened_tensor` (hand it to :meth:`write_back`). For operations that
        work on the bucket's values in place."""
        return self.buffer if self.check_flatten() else self.flattened_tensor()

    def write_back(self, flat: torch.Tensor) -> None:
        """Copy ``flat`` (laid out as :meth:`flattened_tensor`) into the effective tensors, unless it is
        the bucket's own buffer and the tensors are already views of it."""
        if self.buffer is not None and flat.data_ptr() == self.buffer.data_ptr() and self.check_flatten():
            return
        with torch.no_grad():
            for index, tensor in enumerate(self.tensors):
                proxies.effective(tensor).copy_(self.slot_of(flat, index))

    def restore_view(self, tensor: torch.Tensor) -> None:
        """Put ``tensor``'s effective tensor back into its slot of the buffer if it was replaced (an
        optimizer's ``zero_grad(set_to_none=True)`` followed by backward does that)."""
        if self._buffer is None:
            return
        # runs for every parameter of every step: the common cases return after a few attribute reads
        index = self._index[id(tensor)]
        view = self._views[index]
        effective = proxies.effective(tensor)
        if effective is view:
            return
        if effective is not None and effective.data_ptr() == view.data_ptr() and effective.stride() == view.stride():
            return
        if effective is None:
            view.zero_()
        elif effective.requires_grad:
            with torch.no_grad():
                view.copy_(effective.reshape(view.shape))
        else:  # no autograd context or reshape when not needed: each costs several microseconds
            view.copy_(effective if effective.shape == view.shape else effective.reshape(view.shape))
        proxies.set_effective(tensor, view)

    def bind_unset_views(self) -> None:
        """Give every effective tensor that is None (a gradient after ``zero_grad(set_to_none=True)``)
        its zeroed slot of the buffer, before backward: autograd then accumulates into the slot and
        :meth:`restore_view` has nothing to copy. Runs before every training forward; buckets of
        large tensors are left to :meth:`restore_view` (see ``BIND_MAX_MEAN_BYTES``)."""
        if not self._binds_views:
            return
        unset = [i for i, tensor in enumerate(self.tensors) if proxies.effective(tensor) is None]
        if not unset:
            return
        with torch.no_grad():
            if len(unset) == len(self.tensors):
                self._buffer.zero_()
            else:
                for i in unset:
                    self._views[i].zero_()
        for i in unset:
            proxies.set_effective(self.tensors[i], self._views[i])

    def bytes(self) -> int:
        """Size of the bucket's data in bytes (padding included)."""
        return self.padded_numel * self.dtype.itemsize

    # --- readiness and execution ----------------------------------------------------------------
    def mark_ready(self, tensor: torch.Tensor, synchronize: bool = True) -> None:
        """``tensor``'s effective tensor is ready. On CUDA, with ``synchronize``, the current stream is
        noted, and an event recorded on it when the bucket is ready orders the bucket's communication
        after the work that produced the tensor (:mod:`bagua_core.runtime.communication.streams`)."""
        self.restore_view(tensor)
        cuda = self.device.type == "cuda"
        if synchronize and cuda:
            self._ready_events.note(self.device)
        self._ready.add(id(tensor))
        if self.is_ready():
            if cuda:
                self._ready_events.record()
            if self.on_ready is not None:
                self.on_ready(self)

    def mark_all_ready(self, synchronize: bool = True) -> None:
        """Every tensor is ready at once (a lent buffer holds all of them): :meth:`mark_ready` for the bucket."""
        cuda = self.device.type == "cuda"
        if synchronize and cuda:
            self._ready_events.note(self.device)
        self._ready.update(self._index)
        if cuda:
            self._ready_events.record()
        if self.on_ready is not None:
            self.on_ready(self)

    def is_ready(self) -> bool:
        return len(self._ready) == len(self.tensors)

    def reset_ready(self) -> None:
        self._ready.clear()

    def pending_tensors(self) -> list[torch.Tensor]:
        return [t for t in self.tensors if id(t) not in self._ready]

    def execute_ops(self, deferrable: bool = False) -> None:
        """Run the operations in order (on the communication thread). With ``deferrable`` (the
        module's scheduler) the last operation may leave its communication in flight: it hands the
        rest to :meth:`defer`, and :meth:`complete_deferred` finishes it (at the end of backward)."""
        self._deferring = deferrable
        try:
            with streams.run_on(self._communication_stream(), self._ready_events) as done:
                self._done_event = done
                for op in self._ops:
                    op(self)
        finally:
            self._deferring = False

    def _communication_stream(self) -> torch.cuda.Stream | None:
        """CUDA buckets communicate on their process group worker's stream for the device."""
        if self.device.type != "cuda":
            return None
        if self.process_group is None:
            return torch.cuda.current_stream(self.device)
        return self.process_group.worker.cuda_stream(self.device)

    def wait_communication(self) -> None:
        """Order the calling thread's current CUDA stream after the last execution of the operations
        (nothing to do on CPU, where the operations have returned)."""
        streams.wait_for(self._done_event)

    def may_defer(self, op: BucketOp) -> bool:
        """Whether ``op``, now running, may finish later: it is the bucket's last operation and the
        caller of :meth:`execute_ops` completes deferred work before the results are used."""
        return self._deferring and bool(self._ops) and self._ops[-1] is op

    def defer(self, finish: Callable[[], None]) -> None:
        """Register what completes an operation left in flight (see :meth:`may_defer`)."""
        self._deferred.append(finish)

    def complete_deferred(self) -> None:
        """Run what the operations deferred, in order; the bucket's results are final afterwards."""
        pending, self._deferred = self._deferred, []
        for finish in pending:
            finish()

    # --- operations ---------------------------------------------------------------------------
    @property
    def ops(self) -> tuple[BucketOp, ...]:
        """The operations appended, in order (read-only: :meth:`append_op`, :meth:`clear_ops`)."""
        return tuple(self._ops)

    def has_ops(self) -> bool:
        """Whether the bucket has operations to run."""
        return bool(self._ops)

    def clear_ops(self) -> BaguaBucket:
        self._ops.clear()
        return self

    def append_op(self, op: BucketOp) -> BaguaBucket:
        """Append ``op``, any callable ``op(bucket)`` (an op object an algorithm built from classes it
        imports, e.g. ``bagua_core.lifecycle.bucket_ops.centralized.CentralizedSynchronousOp``); the bucket
        runs its ops in order on the communication thread when all its tensors are ready. An op may leave
        its communication in flight (:meth:`may_defer`, :meth:`defer`). Returns the bucket."""
        self._ops.append(op)
        return self

    def __repr__(self) -> str:
        return f"BaguaBucket({self.name!r}, tensors={len(self.tensors)}, bytes={self.bytes()}, flatten={self.flatten})"


def _or_shard(effective: torch.Tensor | None, tensor: torch.Tensor) -> torch.Tensor:
    return effective if effective is not None else local_shard(tensor)


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _dense_strides(tensor: torch.Tensor) -> tuple[int, ...]:
    """``tensor``'s strides when they cover its elements without gaps or overlaps (contiguous,
    channels_last, any permutation), else the contiguous strides of its shape."""
    expected = 1
    for dim in sorted(range(tensor.dim()), key=lambda d: tensor.stride(d)):
        if tensor.size(dim) == 1:
            continue
        if tensor.stride(dim) != expected:
            return _contiguous_strides(tensor.shape)
        expected *= tensor.size(dim)
    return tuple(tensor.stride())
