"""``init_process_group``: the one call that starts a process of a bagua job.

It starts the runtime's default group (:func:`bagua_core.runtime.process_group.init_process_group`)
and, for a replica of a fault-tolerant job, wires fault-tolerant mode onto it in this one place: the
options are checked before any rendezvous, the replica's own group is told that its membership changes
(``BaguaProcessGroup.membership``, what the algorithms read), and the replica's runtime starts. Nothing
is wired at import time.
"""

from __future__ import annotations

import torch.distributed as dist

from bagua_core import fault_tolerance
from bagua_core.runtime import process_group
from bagua_core.runtime.membership import Membership
from bagua_core.runtime.process_group import BaguaProcessGroup

__all__ = ["init_process_group"]


def init_process_group(store: dist.Store | None = None, fault_tolerant: object = None) -> BaguaProcessGroup:
    """Start the default process group from the torchrun variables (``bagua run`` sets them): gloo on
    CPU; with CUDA, NCCL for CUDA tensors and gloo for CPU tensors. ``store`` replaces the
    ``MASTER_ADDR``/``MASTER_PORT`` rendezvous; if torch.distributed is already initialized (by
    Lightning, say) its default group is used. ``BAGUA_BACKEND`` overrides the backend;
    ``BAGUA_COMMUNICATOR=nccl`` runs the collectives on CUDA tensors through bagua's native NCCL
    communicator (an error here, on every rank, says why when it is unavailable).

    ``fault_tolerant``: None follows ``BAGUA_FAULT_TOLERANT`` (set by ``bagua run --fault-tolerant``); True,
    a dict of options (``min_replicas``, ``timeout_s``, ``quorum_timeout_s``, ``hang_timeout_s``,
    ``lighthouse``, ``replica_id``) or ``bagua_core.fault_tolerance.FaultTolerantOptions`` make this process
    a replica of a fault-tolerant job (``docs/fault_tolerance.md``): the default group is then the
    replica's own, and its ``membership`` says that replicas come and go.

    Example::

        >>> import bagua_core as bagua
        >>> bagua.init_process_group()      # in a script started by `bagua run --nproc_per_node 2 ...`
        >>> bagua.get_rank(), bagua.get_world_size()
    """
    options = fault_tolerance.resolve_options(fault_tolerant)  # a bad option fails before any rendezvous
    group = process_group.init_process_group(store, None if options is None else dict(vars(options)))
    if options is not None:
        group.membership = Membership(changes=True, commit="quorum")
        fault_tolerance.start(options)
    return group
