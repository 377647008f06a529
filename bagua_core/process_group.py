"""Process groups: ``init_process_group``, ``new_group``, ``BaguaProcessGroup``, ``from_torch_group``.

Node membership is found by exchanging each rank's node key (``BAGUA_NODE_ID``, else torchrun's
``GROUP_RANK``, else the host name) when the default group starts, so intra-node and inter-node
communicators are right however the ranks are spread over hosts.
"""

from __future__ import annotations

import atexit
import datetime
import gc
import os
import weakref

import torch
import torch.distributed as dist

from bagua_core import env, failure
from bagua_core.communication import small_allreduce
from bagua_core.communication.communicator import BaguaCommunicator
from bagua_core.communication.worker import CommunicationWorker
from bagua_core.exceptions import BaguaError, NotInitializedError, RepeatedInitializationError

__all__ = [
    "BaguaProcessGroup",
    "init_process_group",
    "is_initialized",
    "new_group",
    "from_torch_group",
    "get_default_group",
    "destroy_process_group",
]

_default_group: BaguaProcessGroup | None = None
_node_keys: list[str] = []  # node key of every global rank
_group_count = 0
_all_groups: weakref.WeakSet = weakref.WeakSet()  # every BaguaProcessGroup, released by destroy_process_group


class BaguaProcessGroup:
    """A set of global ranks with its global, intra-node and inter-node communicators.

    Creating one is collective: every process of the job must create the same groups in the same
    order (torch's ``new_group`` requires it).
    """

    def __init__(self, ranks: list[int], torch_group: dist.ProcessGroup | None, name: str) -> None:
        self.ranks = sorted(ranks)
        self.name = name
        me = dist.get_rank()
        nodes: dict[str, list[int]] = {}
        for rank in self.ranks:
            nodes.setdefault(_node_keys[rank], []).append(rank)
        self.node_ranks = list(nodes.values())  # ordered by each node's lowest rank
        self.leaders = [members[0] for members in self.node_ranks]
        self._global = BaguaCommunicator(torch_group, self.ranks, f"{name}/global")
        self._intra = None
        for members in self.node_ranks:
            group = torch_group if len(members) == len(self.ranks) else _new_torch_group(members)
            if me in members:
                self._intra = BaguaCommunicator(group, members, f"{name}/intra")
        inter_group = torch_group if len(self.leaders) == len(self.ranks) else _new_torch_group(self.leaders)
        self._inter = BaguaCommunicator(inter_group if me in self.leaders else None, self.leaders, f"{name}/inter")
        self.worker = CommunicationWorker(name)
        _all_groups.add(self)

    def release(self, wait: bool = True) -> None:
        """Stop the communication thread and drop the torch process groups, so they are destroyed
        with torch.distributed's and not at interpreter exit (where their threads may still run).
        ``wait=False`` (after a failure) does not wait for the thread, which may be blocked in a
        collective its peers will never join."""
        self.worker.shutdown(wait=wait)
        for comm in (self._global, self._intra, self._inter):
            if comm is not None:
                comm.release()

    # seed API -------------------------------------------------------------------------------
    def get_global_communicator(self) -> BaguaCommunicator:
        return self._global

    def get_intra_node_communicator(self) -> BaguaCommunicator:
        if self._intra is None:
            return BaguaCommunicator(None, self.node_ranks[0], f"{self.name}/intra")  # non-member view
        return self._intra

    def get_inter_node_communicator(self) -> BaguaCommunicator:
        """Communicator among the node leaders (the lowest rank of each node); rank() is -1 elsewhere."""
        return self._inter

    # facts about this process -----------------------------------------------------------------
    @property
    def global_rank(self) -> int:
        return dist.get_rank()

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def local_rank(self) -> int:
        return self.get_intra_node_communicator().rank()

    @property
    def local_size(self) -> int:
        return self.get_intra_node_communicator().nranks()

    @property
    def node_rank(self) -> int:
        return next(i for i, members in enumerate(self.node_ranks) if dist.get_rank() in members)

    @property
    def num_nodes(self) -> int:
        return len(self.node_ranks)

    def __repr__(self) -> str:
        return f"BaguaProcessGroup({self.name!r}, ranks={self.ranks}, nodes={self.node_ranks})"


def _new_torch_group(ranks: list[int]) -> dist.ProcessGroup:
    return dist.new_group(ranks, timeout=datetime.timedelta(seconds=env.get_comm_timeout_s()))


def _next_name() -> str:
    global _group_count
    _group_count += 1
    return f"pg{_group_count}"


def is_initialized() -> bool:
    """Whether ``init_process_group`` has run in this process."""
    return _default_group is not None


def get_default_group_or_none() -> BaguaProcessGroup | None:
    return _default_group


def get_default_group() -> BaguaProcessGroup:
    if _default_group is None:
        raise NotInitializedError("bagua is not initialized: call bagua_core.init_process_group() first")
    return _default_group


def _elastic_attempt_store() -> dist.Store | None:
    """Under torchelastic, the agent's store with a prefix of this restart attempt's own.

    The workers of every attempt share the agent's store and nothing removes a previous attempt's
    keys, so a restarted worker could read a dead peer's address and fail to connect; the prefix keeps
    the attempts apart. ``None`` outside torchelastic (``env://`` is used)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    store = dist.TCPStore(
        env.get_master_addr(), env.get_master_port(), env.get_world_size(), is_master=False,
        timeout=datetime.timedelta(seconds=env.get_comm_timeout_s()),
    )
    return dist.PrefixStore(f"/bagua/attempt_{attempt}", store)


def init_process_group(store: dist.Store | None = None) -> BaguaProcessGroup:
    """Start the default process group from the torchrun variables (gloo on CPU, NCCL on CUDA).

    ``store`` replaces the ``MASTER_ADDR``/``MASTER_PORT`` rendezvous. If torch.distributed is already
    initialized (by Lightning, say) its default group is used. ``BAGUA_BACKEND`` overrides the backend;
    ``BAGUA_COMMUNICATOR=nccl`` runs the collectives on CUDA tensors through bagua's native NCCL
    communicator (an error here, on every rank, says why when it is unavailable).

    Example::

        >>> import bagua_core as bagua
        >>> bagua.init_process_group()      # in a script started by `bagua run --nproc_per_node 2 ...`
        >>> bagua.get_rank(), bagua.get_world_size()
    """
    global _default_group, _node_keys
    if _default_group is not None:
        raise RepeatedInitializationError(
            "bagua's process group is already initialized; init_process_group() must be called once per process"
        )
    if env.get_communicator_backend() == "nccl":  # fail before any rendezvous, on every rank
        from bagua_core import native

        if not native.has_nccl:
            raise BaguaError(
                f"BAGUA_COMMUNICATOR=nccl, but bagua's NCCL communicator is unavailable: "
                f"{native.nccl_unavailable_reason}; unset BAGUA_COMMUNICATOR to use torch.distributed"
            )
    if not dist.is_initialized():
        use_cuda = torch.cuda.is_available()
        backend = os.environ.get("BAGUA_BACKEND") or ("nccl" if use_cuda else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(env.get_local_rank())
        timeout = datetime.timedelta(seconds=env.get_comm_timeout_s())
        if store is None:
            store = _elastic_attempt_store()
        if store is not None:
            dist.init_process_group(
                backend, store=store, rank=env.get_rank(), world_size=env.get_world_size(), timeout=timeout
            )
        else:
            dist.init_process_group(backend, init_method="env://", timeout=timeout)
    facts: list[tuple | None] = [None] * dist.get_world_size()
    dist.all_gather_object(facts, (env.get_node_key(), os.environ.get("BAGUA_SMALL_ALLREDUCE_BYTES", ""),
                                   failure.record.this_process()))
    _node_keys = [str(fact[0]) for fact in facts]
    _agree_small_allreduce_bytes([fact[1] for fact in facts])
    _default_group = BaguaProcessGroup(list(range(dist.get_world_size())), dist.group.WORLD, "default")
    failure.start(dist.get_rank(), dist.get_world_size(), [tuple(fact[2]) for fact in facts])
    atexit.register(_destroy_at_exit)
    return _default_group


def _agree_small_allreduce_bytes(raws: list[str]) -> None:
    """Every rank checks every rank's ``BAGUA_SMALL_ALLREDUCE_BYTES``: a difference (which would pair
    point-to-point messages with gloo's allreduce and hang) or a bad value raises on every rank."""
    if len(set(raws)) > 1:
        values = ", ".join(f"rank {rank}: {raw or '(unset)'}" for rank, raw in enumerate(raws))
        raise BaguaError(f"BAGUA_SMALL_ALLREDUCE_BYTES must be the same on every rank, got {values}")
    small_allreduce.threshold_bytes = env.get_small_allreduce_bytes(raws[0])


def _destroy_at_exit() -> None:
    if _default_group is not None:
        destroy_process_group()


def new_group(ranks: list[int] | None = None) -> BaguaProcessGroup:
    """A process group over ``ranks`` (all ranks when None). Collective: every rank must call it."""
    get_default_group()
    world = dist.get_world_size()
    if ranks is None:
        ranks = list(range(world))
    ranks = sorted(set(int(r) for r in ranks))
    if not ranks or ranks[0] < 0 or ranks[-1] >= world:
        raise ValueError(f"new_group ranks must be a non-empty subset of 0..{world - 1}, got {ranks}")
    torch_group = dist.group.WORLD if len(ranks) == world else _new_torch_group(ranks)
    return BaguaProcessGroup(ranks, torch_group if dist.get_rank() in ranks else None, _next_name())


def from_torch_group(group: dist.ProcessGroup) -> BaguaProcessGroup:
    """Wrap an existing torch process group. Collective over the whole job (sub-groups are created)."""
    get_default_group()
    ranks = dist.get_process_group_ranks(group) if group is not dist.group.WORLD else list(range(dist.get_world_size()))
    return BaguaProcessGroup(ranks, group, _next_name())


def destroy_process_group() -> None:
    """Stop the default group and torch.distributed (tests and clean shutdown). Also runs at exit.

    Process groups kept alive by reference cycles (a wrapped module's hooks, DDP's reducer) are
    collected here too: destroyed later, during interpreter finalization, their backend threads can
    be killed while taking the GIL, which aborts the process ("terminate called without an active
    exception") after all its work is done."""
    global _default_group
    failed = failure.record.state.failure is not None
    failure.stop()  # after this rank's own failure: lingers until the peers learned it
    for group in list(_all_groups):
        group.release(wait=not failed)
    _all_groups.clear()
    _default_group = None
    small_allreduce.threshold_bytes = 0
    if dist.is_initialized():
        dist.destroy_process_group()  # returns at once even with collectives in flight (after a failure)
    gc.collect()
