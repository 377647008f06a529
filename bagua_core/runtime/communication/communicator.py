"""``BaguaCommunicator``: a set of ranks and the torch process group that connects them."""

from __future__ import annotations

import torch
import torch.distributed as dist

from bagua_core.runtime import env
from bagua_core.runtime.communication import small_allreduce
from bagua_core.runtime.torch_groups import backend_of
from bagua_core.runtime.exceptions import BaguaError
from bagua_core.runtime.failure import abort
from bagua_core.runtime.job_store import job_store

__all__ = ["BaguaCommunicator"]


class BaguaCommunicator:
    """The members of one communication domain (global, intra-node or inter-node).

    ``rank()`` is this process's index among ``global_ranks`` (-1 when it is not a member, as on the
    inter-node communicator of a non-leader); ``nranks()`` is the number of members. Collectives take
    and return ranks *of this communicator*; what they hand to torch is the member's rank in
    ``torch_group`` (:meth:`group_rank`), never its global rank, so a group torch's tables do not know
    (fault-tolerant mode's, whose ``global_ranks`` are bagua's own bookkeeping) works as torch's do.

    ``group_ranks``: the rank in ``torch_group`` of each member, when it is not the member's index (a torch
    group whose ranks are not in the order of their global ranks, ``new_group(sort_ranks=False)``).
    """

    def __init__(self, torch_group: dist.ProcessGroup | None, global_ranks: list[int], name: str,
                 group_ranks: list[int] | None = None) -> None:
        self.torch_group = torch_group
        abort.watch(torch_group)  # aborted (NCCL) when a rank fails
        self.global_ranks = list(global_ranks)
        self.group_ranks = list(group_ranks) if group_ranks is not None else list(range(len(self.global_ranks)))
        """The rank in ``torch_group`` of each member (member ``i``: ``group_ranks[i]``)."""
        self.name = name
        me = dist.get_rank()
        self._rank = self.global_ranks.index(me) if me in self.global_ranks else -1
        if torch_group is not None and self._rank >= 0 and torch_group.rank() != self.group_ranks[self._rank]:
            raise BaguaError(
                f"communicator {name!r}: this process is member {self._rank} (group rank "
                f"{self.group_ranks[self._rank]}) but rank {torch_group.rank()} of its torch process group"
            )
        self.use_native_nccl = env.get_communicator_backend() == "nccl"
        self._nccl = None
        self.small_allreduce_bytes = 0
        """Allreduces of CPU tensors up to this size run :mod:`small_allreduce` (gloo groups only)."""
        if torch_group is not None and self._rank >= 0 and "gloo" in backend_of(torch_group):
            self.small_allreduce_bytes = small_allreduce.threshold_bytes

    def use_small_allreduce(self, tensor: torch.Tensor) -> bool:
        """Whether an allreduce of ``tensor`` runs :func:`small_allreduce.small_allreduce_inplace`
        (the same answer on every rank: it depends on the agreed threshold, size, dtype and device)."""
        return (
            tensor.numel() * tensor.element_size() <= self.small_allreduce_bytes
            and tensor.device.type == "cpu"
            and tensor.dtype is not torch.bool
        )

    def native_nccl_for(self, tensor: torch.Tensor):
        """The native NCCL communicator when ``BAGUA_COMMUNICATOR=nccl`` and ``tensor`` is on CUDA,
        else None (torch.distributed runs the collective). Built on first use, which is collective:
        every member reaches it in the same collective, the unique id travels through torch's store."""
        if not (self.use_native_nccl and tensor.is_cuda):
            return None
        if self._nccl is None:
            from bagua_core.runtime.native.nccl import NCCLCommunicator

            self._nccl = NCCLCommunicator(job_store(), self._rank, self.nranks(), prefix=f"bagua/{self.name}/",
                                          device=tensor.device)
        return self._nccl

    def release(self) -> None:
        """Forget the torch process group and the native NCCL communicator (after shutdown)."""
        self.torch_group = None
        if self._nccl is not None:
            self._nccl.destroy()
            self._nccl = None

    def rank(self) -> int:
        return self._rank

    def nranks(self) -> int:
        return len(self.global_ranks)

    @property
    def is_member(self) -> bool:
        return self._rank >= 0

    @property
    def backend(self) -> str:
        return backend_of(self.torch_group) if self.is_member else "none"

    def global_rank(self, comm_rank: int) -> int:
        """Global rank of member ``comm_rank``; a clear error for an index out of range."""
        if not isinstance(comm_rank, int) or not 0 <= comm_rank < self.nranks():
            raise ValueError(
                f"rank {comm_rank!r} is not in communicator {self.name!r} of {self.nranks()} ranks "
                f"(valid: 0..{self.nranks() - 1})"
            )
        return self.global_ranks[comm_rank]

    def group_rank(self, comm_rank: int) -> int:
        """Rank in ``torch_group`` of member ``comm_rank``: what torch's ``group_dst=`` / ``group_src=`` take."""
        self.global_rank(comm_rank)  # the same clear error for an index out of range
        return self.group_ranks[comm_rank]

    def check_member(self) -> None:
        if not self.is_member:
            raise BaguaError(
                f"this process (global rank {dist.get_rank()}) is not a member of communicator {self.name!r} "
                f"(members {self.global_ranks}); only members may call its collectives"
            )

    def __repr__(self) -> str:
        return f"BaguaCommunicator({self.name!r}, rank={self._rank}, ranks={self.global_ranks})"
