"""The job's key-value store: the one torch's default process group was made with.

Every rank of the job reaches it (torchrun's rendezvous store, or the ``init_method``'s), so bagua
keeps there what the ranks exchange outside collectives: the first failure of the job
(:mod:`bagua_core.runtime.failure.record`), the native NCCL communicators' unique ids, and in
fault-tolerant mode the quorum store address a replica's first rank publishes for the others.

Example::

    >>> store = job_store()             # after torch.distributed.init_process_group
    >>> store.set("bagua/example", "1")
"""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["job_store"]


def job_store() -> dist.Store:
    """The default process group's store (``ProcessGroup.get_group_store``, public since torch 2.9).
    Raises ``RuntimeError`` when torch.distributed is not initialized."""
    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialized: call bagua.init_process_group() first")
    return dist.group.WORLD.get_group_store()
