"""One bucket's PowerSGD exchange (Vogels et al., 2019), the mathematics of torch's ``powerSGD_hook``.

Each tensor of the bucket is viewed as a matrix ``M`` (``shape[0]`` rows); it is compressed when
``(rows + cols) * r * min_compression_rate < rows * cols`` (r = min(rows, cols, rank)), the others
(vectors, small matrices) are averaged uncompressed. With error feedback ``e`` (the whole bucket)::

    M += e;  keep a copy
    Q: warm-started from the previous step and orthonormalised (random the first time)
    P = M Q;  allreduce(SUM) [uncompressed | P] in one message; uncompressed /= n
    orthonormalise P;  Q = M^T P;  allreduce(SUM) Q;  Q /= n
    M = P Q^T;  e = copy - bucket

Communicated per bucket and step: two allreduces in the bucket's dtype, ``sum(rows * r)`` values plus
the uncompressed tensors, then ``sum(cols * r)`` values. The random first Q comes from a seed drawn
from a ``numpy.random.RandomState(random_seed)`` shared by the buckets, in bucket order (the same on
every rank), with torch's RNG forked so that the user's random stream is untouched.

Example::

    >>> bucket.append_op(PowerSGDOp(impl))     # impl: the PowerSGDAlgorithmImpl (options, step, RNG)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from bagua_core.api import ReduceOp, allreduce_inplace, allreduce_inplace_start

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.api import BaguaBucket

__all__ = ["PowerSGDOp", "PowerSGDOptions", "PowerSGDProgress", "orthogonalise_", "should_compress"]


class PowerSGDOptions(Protocol):
    """The options the op reads (``PowerSGDConfig`` has them, documented there)."""

    matrix_approximation_rank: int
    start_iter: int
    min_compression_rate: float
    use_error_feedback: bool
    warm_start: bool
    orthogonalization_epsilon: float


class PowerSGDProgress(Protocol):
    """What the op reads of its impl each step (``PowerSGDAlgorithmImpl`` has it): the impl builds the
    ops, so this module describes it instead of importing it."""

    process_group: Any  # the algorithm's BaguaProcessGroup, None: the bucket's
    config: PowerSGDOptions
    iter: int
    """Steps done; below ``config.start_iter`` the op allreduces uncompressed."""
    rng: np.random.RandomState
    """Draws the seed of each first Q, in bucket order (the same on every rank)."""


def orthogonalise_(matrices: torch.Tensor, epsilon: float = 0.0) -> None:
    """Orthonormalise the columns of each matrix of the batch ``matrices`` ([b, n, r], r <= n) in
    place: Gram-Schmidt for r <= 2 (and half precision), else QR."""
    rank = matrices.shape[2]
    if rank <= 2 or matrices.dtype in (torch.float16, torch.bfloat16):
        for i in range(rank):
            col = matrices[:, :, i : i + 1]
            norm = torch.norm(col, dim=1, keepdim=True)
            col /= norm if epsilon == 0 else norm + epsilon
            if i + 1 < rank:
                rest = matrices[:, :, i + 1 :]
                rest -= torch.sum(col * rest, dim=1, keepdim=True) * col
    else:
        r = torch.empty(matrices.shape[0], rank, rank, dtype=matrices.dtype, device=matrices.device)
        torch.linalg.qr(matrices, out=(matrices, r))


def should_compress(rows: int, cols: int, rank: int, min_compression_rate: float) -> bool:
    return (rows + cols) * rank * min_compression_rate < rows * cols


class _Layout:
    """Which tensors of a bucket are compressed, grouped by shape (first-seen order), and where their
    P and Q live in the flat P and Q buffers."""

    def __init__(self, shapes: list[torch.Size], offsets: list[int], rank: int, min_compression_rate: float) -> None:
        self.uncompressed: list[tuple[int, int]] = []  # (offset, numel)
        by_shape: dict[tuple[int, int], list[int]] = {}
        for shape, offset in zip(shapes, offsets):
            numel = shape.numel()
            rows = shape[0] if len(shape) else 1
            cols = numel // rows if rows else 0
            r = min(rows, cols, rank)
            if len(shape) and numel and should_compress(rows, cols, r, min_compression_rate):
                by_shape.setdefault((rows, cols), []).append(offset)
            else:
                self.uncompressed.append((offset, numel))
        self.matrices: list[tuple[int, int, int, int, int, int]] = []  # (offset, rows, cols, r, p_at, q_at)
        p_at = q_at = 0
        for (rows, cols), group in by_shape.items():
            r = min(rows, cols, rank)
            for offset in group:
                self.matrices.append((offset, rows, cols, r, p_at, q_at))
                p_at += rows * r
                q_at += cols * r
        self.u_numel = sum(numel for _, numel in self.uncompressed)
        self.p_numel, self.q_numel = p_at, q_at


class PowerSGDOp:
    """The bucket operation; it keeps the bucket's error, P and Q from step to step."""

    def __init__(self, impl: PowerSGDProgress) -> None:
        self.impl = impl
        self.layout: _Layout | None = None
        self.error: torch.Tensor | None = None
        self.q_memory: torch.Tensor | None = None
        self.message: torch.Tensor | None = None  # [uncompressed | P]
        self.copy: torch.Tensor | None = None  # the bucket before compression (error feedback)
        self._views: tuple[int, int, list] | None = None  # (flat's address, Q's address, (M, P, Q) views)

    def __call__(self, bucket: BaguaBucket) -> None:
        comm = (self.impl.process_group or bucket.process_group).get_global_communicator()
        flat = bucket.flattened_view()
        flattened = flat is bucket.buffer
        if self.impl.iter < self.impl.config.start_iter:
            if bucket.may_defer(self):  # the plain allreduce stays in flight while later buckets start
                finish = allreduce_inplace_start(flat, op=ReduceOp.AVG, comm=comm)
                bucket.defer(finish if flattened else lambda: (finish(), bucket.write_back(flat)))
                return
            allreduce_inplace(flat, op=ReduceOp.AVG, comm=comm)
        else:
            with torch.no_grad():
                self.compress_and_average(flat, bucket, comm)
        if not flattened:
            bucket.write_back(flat)

    def _matrices(self, flat: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(M, P, Q)`` per compressed tensor, each a [1, rows|cols, ...] view into its buffer (kept while
        the buffers stay: a flattened bucket's buffer is the same every step)."""
        assert self.layout is not None and self.message is not None and self.q_memory is not None
        key = (flat.data_ptr(), self.q_memory.data_ptr())
        if self._views is not None and self._views[:2] == key:
            return self._views[2]
        p_memory = self.message[self.layout.u_numel :]
        out = []
        for offset, rows, cols, r, p_at, q_at in self.layout.matrices:
            m = flat[offset : offset + rows * cols].view(1, rows, cols)
            p = p_memory[p_at : p_at + rows * r].view(1, rows, r)
            q = self.q_memory[q_at : q_at + cols * r].view(1, cols, r)
            out.append((m, p, q))
        self._views = (*key, out)
        return out

    def _uncompressed(self, flat: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The places of the tensors averaged uncompressed: in the message, and in ``flat``."""
        assert self.layout is not None and self.message is not None
        sent, kept, at = [], [], 0
        for offset, numel in self.layout.uncompressed:
            sent.append(self.message[at : at + numel])
            kept.append(flat[offset : offset + numel])
            at += numel
        return sent, kept

    def compress_and_average(self, flat: torch.Tensor, bucket: BaguaBucket, comm: Any) -> None:
        config, n = self.impl.config, comm.nranks()
        if self.layout is None:
            shapes = [torch.Size(shape) for shape in bucket.shapes]
            self.layout = _Layout(shapes, bucket.offsets, config.matrix_approximation_rank, config.min_compression_rate)
        layout = self.layout
        copy = None
        if config.use_error_feedback:
            if self.error is None:
                self.error = torch.zeros_like(flat)
            else:
                flat.add_(self.error)
            if self.copy is None or self.copy.numel() != flat.numel():
                self.copy = torch.empty_like(flat)
            copy = self.copy.copy_(flat)
        if self.message is None:
            self.message = torch.empty(layout.u_numel + layout.p_numel, dtype=flat.dtype, device=flat.device)
        randomise = not config.warm_start or self.q_memory is None
        if self.q_memory is None:
            self.q_memory = torch.empty(layout.q_numel, dtype=flat.dtype, device=flat.device)
        matrices = self._matrices(flat)
        if randomise:
            seed = int(self.impl.rng.randint(1_000_000_000))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                for _, _, q in matrices:
                    q.copy_(torch.randn(*q.shape, device="cpu", dtype=flat.dtype))
        for _, _, q in matrices:
            orthogonalise_(q, config.orthogonalization_epsilon)
        for m, p, q in matrices:
            torch.bmm(m, q, out=p)
        sent, kept = self._uncompressed(flat)
        if sent:
            torch._foreach_copy_(sent, kept)  # the tensors averaged uncompressed, into the message
        if self.message.numel():  # the same on every rank: the layout follows the model
            allreduce_inplace(self.message, op=ReduceOp.SUM, comm=comm)
        self.message[: layout.u_numel].div_(n)
        if sent:
            torch._foreach_copy_(kept, sent)  # and their averages back into the bucket
        for _, p, _ in matrices:
            orthogonalise_(p, config.orthogonalization_epsilon)
        for m, p, q in matrices:
            torch.bmm(m.transpose(1, 2), p, out=q)
        if self.q_memory.numel():
            allreduce_inplace(self.q_memory, op=ReduceOp.SUM, comm=comm)
            self.q_memory.div_(n)
        for m, p, q in matrices:
            torch.bmm(p, q.transpose(1, 2), out=m)
        if copy is not None:
            torch.sub(copy, flat, out=self.error)
        if not config.warm_start:
            self.q_memory = None
