"""Process groups: ``init_process_group``, ``new_group``, ``BaguaProcessGroup``, ``from_torch_group``.

Node membership is found by exchanging each rank's node key (``BAGUA_NODE_ID``, else torchrun's
``GROUP_RANK``, else the host name) when the default group starts, so intra-node and inter-node
communicators are right however the ranks are spread over hosts.
"""

from __future__ import annotations

import atexit
import datetime
import gc
import logging
import os
import weakref
from collections.abc import Callable, Iterator, MutableMapping

import torch
import torch.distributed as dist

from bagua_core.runtime import env, exit_watch, failure, group_teardown
from bagua_core.runtime.communication import small_allreduce
from bagua_core.runtime.communication.communicator import BaguaCommunicator
from bagua_core.runtime.communication.worker import CommunicationWorker
from bagua_core.runtime.exceptions import BaguaError, NotInitializedError, RepeatedInitializationError
from bagua_core.runtime.failure import abort
from bagua_core.runtime.membership import FIXED, Membership

__all__ = [
    "BaguaProcessGroup",
    "init_process_group",
    "is_initialized",
    "new_group",
    "from_torch_group",
    "get_default_group",
    "destroy_process_group",
    "before_destroy",
    "choose_backend",
    "rank_not_in_group",
    "torch_to_bagua_pg_map",
    "bagua_group_of",
]

logger = logging.getLogger(__name__)
_CREATE = object()  # BaguaProcessGroup creates its torch process group
_default_group: BaguaProcessGroup | None = None
_node_keys: list[str] = []  # node key of every global rank
_group_count = 0
_all_groups: weakref.WeakSet = weakref.WeakSet()  # every BaguaProcessGroup, released by destroy_process_group
_before_destroy: list[Callable[[], None]] = []  # what destroy_process_group runs first (before_destroy)


class BaguaProcessGroup:
    """A set of global ranks with its global, intra-node and inter-node communicators.

    Creating one is collective: every process of the job must create the same groups in the same
    order (torch's ``new_group`` requires it).
    """

    membership: Membership = FIXED
    """Who trains with this group and how that may change (:mod:`bagua_core.runtime.membership`): fixed in
    a fail-fast job; a fault-tolerant job's bootstrap marks the replica's own group, and each quorum's
    group carries its quorum."""
    siblings: tuple[tuple[int, ...], ...] = ()
    """The rank sets of the groups made together with this one, each rank in one (a sharded model's groups:
    one per shard, the ranks of the nodes holding it); empty for a group made alone. :meth:`new_channel`
    makes a channel for every one of them, as ``new_group`` is collective over the job."""

    def __init__(self, ranks: list[int], stream: object, group_name: str, torch_group: object = _CREATE) -> None:
        """``ranks``: global ranks of the members (in ``torch_group``'s rank order when one is given);
        ``stream``: the CUDA stream of the group's communication (kept for the original's API; None on CPU);
        ``group_name``: its name. ``torch_group``: the torch process group connecting the members (None on
        non-members); by default one is created, which is collective over the whole job."""
        self.ranks = sorted(ranks)
        in_group_order = list(ranks) if torch_group is not _CREATE else self.ranks
        self.name = self.group_name = group_name
        self.stream = stream
        me = dist.get_rank()
        if torch_group is _CREATE:
            torch_group = dist.group.WORLD if len(self.ranks) == dist.get_world_size() else _new_torch_group(self.ranks)
            torch_group = torch_group if me in self.ranks else None
        self.torch_group = torch_group
        name = group_name
        nodes: dict[str, list[int]] = {}
        for rank in self.ranks:
            nodes.setdefault(_node_keys[rank], []).append(rank)
        self.node_ranks = list(nodes.values())  # ordered by each node's lowest rank
        self.leaders = [members[0] for members in self.node_ranks]
        # a member's rank in torch_group (what torch is handed): its place in the group's order; the groups
        # made here are in global-rank order (new_group sorts), where it is the member's index
        place = {rank: i for i, rank in enumerate(in_group_order)}
        in_torch_group = [place[rank] for rank in self.ranks]
        self._global = BaguaCommunicator(torch_group, self.ranks, f"{name}/global", in_torch_group)
        self._intra = None
        for members in self.node_ranks:
            whole = len(members) == len(self.ranks)
            group = torch_group if whole else _new_torch_group(members)
            if me in members:
                self._intra = BaguaCommunicator(group, members, f"{name}/intra", in_torch_group if whole else None)
        whole = len(self.leaders) == len(self.ranks)
        inter_group = torch_group if whole else _new_torch_group(self.leaders)
        self._inter = BaguaCommunicator(inter_group if me in self.leaders else None, self.leaders, f"{name}/inter",
                                        in_torch_group if whole else None)
        self.worker = CommunicationWorker(name)
        _all_groups.add(self)

    @staticmethod
    def new_torch_group(ranks: list[int]) -> dist.ProcessGroup:
        """A torch process group over the global ``ranks``, with the job's communication timeout
        (``BAGUA_COMM_TIMEOUT_S``), aborted with bagua's others when a rank fails (NCCL: its collectives in
        flight return). Collective over the whole job, as torch's ``new_group``: every rank calls it, in the
        same order. For an algorithm's groups over other rank sets than its process group's (a topology's
        edges)."""
        return _new_torch_group(list(ranks))

    @staticmethod
    def default_or_none() -> BaguaProcessGroup | None:
        """The default group, or None before ``init_process_group`` (a plugin's entry point that sets bagua up
        when only ``torch.distributed`` is asks it first)."""
        return get_default_group_or_none()

    def torch_groups(self) -> list:
        """The torch process groups this group and its communicators hold (none after ``release``)."""
        held = [self.torch_group] + [c.torch_group for c in (self._global, self._intra, self._inter) if c is not None]
        return list({id(g): g for g in held if g is not None}.values())

    def release(self, wait: bool = True) -> None:
        """Stop the communication thread and drop the torch process groups, so they are destroyed
        with torch.distributed's and not at interpreter exit (where their threads may still run).
        ``wait=False`` (after a failure) does not wait for the thread, which may be blocked in a
        collective its peers will never join."""
        self.worker.shutdown(wait=wait)
        self.torch_group = None  # a wrapped module, kept alive by its hooks' cycle through C++, holds this group
        for comm in (self._global, self._intra, self._inter):
            if comm is not None:
                comm.release()

    def new_channel(self) -> dist.ProcessGroup | None:
        """A torch process group of its own over this group's ranks (None on a rank outside them), for an
        algorithm's messages that travel beside the group's other ones (an exchange left in flight, a
        background thread). Collective over the whole job, in the same order everywhere (torch's
        ``new_group``); for a group made with siblings (:attr:`siblings`: a sharded model's) one is made per
        sibling and this rank's is returned.

        Example::

            >>> side = process_group.new_channel()
            >>> work = dist.all_reduce(delta, group=side, async_op=True)   # beside the buckets' traffic
        """
        sets = self.siblings or (tuple(self.ranks),)
        made = [_new_torch_group(list(ranks)) for ranks in sets]
        me = dist.get_rank()
        return next((group for group, ranks in zip(made, sets) if me in ranks), None)

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
    group = dist.new_group(ranks, timeout=datetime.timedelta(seconds=env.get_comm_timeout_s()))
    abort.watch(group)
    return group


def _next_name() -> str:
    global _group_count
    _group_count += 1
    return f"pg{_group_count}"


def is_initialized() -> bool:
    """Whether ``init_process_group`` has run in this process."""
    return _default_group is not None


def get_default_group_or_none() -> BaguaProcessGroup | None:
    return _default_group


env.set_membership_source(get_default_group_or_none)  # env is below this module: it is told, it does not import


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


def init_process_group(store: dist.Store | None = None,
                       process_features: dict[str, dict] | None = None) -> BaguaProcessGroup:
    """The runtime's half of ``bagua_core.init_process_group`` (:mod:`bagua_core.bootstrap`, which documents the
    rest): the default group from the torchrun variables or ``store`` (:func:`choose_backend`). ``process_features``:
    what this process runs for its whole life (name -> options); every rank must run the same, which is checked
    here, before the default group is built."""
    global _default_group, _node_keys
    if _default_group is not None:
        raise RepeatedInitializationError(
            "bagua's process group is already initialized; init_process_group() must be called once per process"
        )
    if env.get_communicator_backend() == "nccl":  # fail before any rendezvous, on every rank
        from bagua_core.runtime import native

        if not native.has_nccl:
            raise BaguaError(
                f"BAGUA_COMMUNICATOR=nccl, but bagua's NCCL communicator is unavailable: "
                f"{native.nccl_unavailable_reason}; unset BAGUA_COMMUNICATOR to use torch.distributed"
            )
    if not dist.is_initialized():
        backend, device_index, note = choose_backend()
        if device_index is not None:
            torch.cuda.set_device(device_index)
        if note and env.get_rank() == 0:
            logger.warning("bagua: %s", note)
        timeout = datetime.timedelta(seconds=env.get_comm_timeout_s())
        if store is None:
            store = _elastic_attempt_store()
        if store is not None:
            dist.init_process_group(
                backend, store=store, rank=env.get_rank(), world_size=env.get_world_size(), timeout=timeout
            )
        else:
            _require_launcher_environment()
            dist.init_process_group(backend, init_method="env://", timeout=timeout)
    facts: list[tuple | None] = [None] * dist.get_world_size()
    dist.all_gather_object(facts, (env.get_node_key(), os.environ.get("BAGUA_SMALL_ALLREDUCE_BYTES", ""),
                                   failure.record.this_process(), process_features or {}))
    _node_keys = [str(fact[0]) for fact in facts]
    _agree_small_allreduce_bytes([fact[1] for fact in facts])
    _agree_process_features([fact[3] for fact in facts])
    _default_group = BaguaProcessGroup(list(range(dist.get_world_size())), None, "default", torch_group=dist.group.WORLD)
    failure.start(dist.get_rank(), dist.get_world_size(), [tuple(fact[2]) for fact in facts])
    atexit.register(_destroy_at_exit)
    return _default_group


_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _require_launcher_environment() -> None:
    """A script started without a launcher (``python train.py``) lacks the rendezvous variables: say how to
    start it instead of torch's bare ``environment variable RANK expected``."""
    missing = [name for name in _LAUNCHER_VARIABLES if not os.environ.get(name)]
    if missing:
        raise BaguaError(
            f"this process was not started by a launcher ({', '.join(missing)} not set): start the script with "
            f"`bagua run --nproc_per_node=N script.py` (or torchrun), which sets RANK, WORLD_SIZE, LOCAL_RANK, "
            f"MASTER_ADDR and MASTER_PORT for every worker; one process alone: `bagua run --nproc_per_node=1 "
            f"script.py`")


def choose_backend() -> tuple[str, int | None, str]:
    """The torch.distributed backend, the CUDA device this process uses (None: none), and a note for
    the log when the choice is not the obvious one.

    ``BAGUA_BACKEND`` wins. Otherwise, with CUDA and at least one GPU per local rank,
    ``"cpu:gloo,cuda:nccl"``: collectives on CUDA tensors run on NCCL and the control collectives on
    CPU tensors (flags, object gathers, autotune's decision) on gloo, in the same job. With more local
    ranks than GPUs NCCL cannot run (it allows one rank per device), so the ranks share the GPUs over
    gloo, whose collectives handle CUDA tensors (bagua stages point-to-point messages through the host).
    Without CUDA, gloo.

    Example::

        >>> choose_backend()          # 8 local ranks, 8 GPUs, LOCAL_RANK=3
        ('cpu:gloo,cuda:nccl', 3, '')
    """
    forced = os.environ.get("BAGUA_BACKEND", "").strip()
    if not torch.cuda.is_available():
        return forced or "gloo", None, ""
    gpus, local_rank, local_size = torch.cuda.device_count(), env.get_local_rank(), env.get_local_size()
    if forced:
        uses_nccl = "nccl" in forced
        if uses_nccl and local_rank >= gpus:
            raise BaguaError(
                f"BAGUA_BACKEND={forced} needs one GPU per local rank, but local rank {local_rank} of "
                f"{local_size} has only {gpus} GPU(s); start at most {gpus} processes per node or use "
                f"BAGUA_BACKEND=gloo"
            )
        return forced, local_rank % gpus, ""
    if local_size <= gpus:
        return "cpu:gloo,cuda:nccl", local_rank, ""
    note = (
        f"{local_size} local ranks share {gpus} GPU(s): NCCL allows one rank per device, so collectives "
        f"run over gloo (CUDA tensors included); start at most {gpus} processes per node for NCCL"
    )
    return "gloo", local_rank % gpus, note


def _agree_small_allreduce_bytes(raws: list[str]) -> None:
    """Every rank checks every rank's ``BAGUA_SMALL_ALLREDUCE_BYTES``: a difference (which would pair
    point-to-point messages with gloo's allreduce and hang) or a bad value raises on every rank."""
    if len(set(raws)) > 1:
        values = ", ".join(f"rank {rank}: {raw or '(unset)'}" for rank, raw in enumerate(raws))
        raise BaguaError(f"BAGUA_SMALL_ALLREDUCE_BYTES must be the same on every rank, got {values}")
    small_allreduce.threshold_bytes = env.get_small_allreduce_bytes(raws[0])


def _agree_process_features(features: list[dict[str, dict]]) -> None:
    """Every rank of the group must run the same process features with the same options (a rank that joins a
    quorum while its peer does not would leave the other waiting): a difference raises on every rank, naming
    the feature, the option and each rank's value."""
    if all(f == features[0] for f in features):
        return
    names = [sorted(f) for f in features]
    if any(n != names[0] for n in names):
        shown = ", ".join(f"rank {r}: {', '.join(n) or 'none'}" for r, n in enumerate(names))
        raise BaguaError(f"the ranks of one group must all run the same process features, got {shown} (each is "
                         f"turned on by its argument of init_process_group or its environment; bagua plugins lists "
                         f"them)")
    name = next(n for n in names[0] if any(f[n] != features[0][n] for f in features))
    field = next(k for k in features[0][name] if any(f[name].get(k) != features[0][name][k] for f in features))
    values = ", ".join(f"rank {r}: {f[name].get(field)!r}" for r, f in enumerate(features))
    raise BaguaError(f"process feature {name!r} option {field!r} differs between the ranks of one group: {values}")


def _destroy_at_exit() -> None:
    if _default_group is not None:
        destroy_process_group()
        exit_watch.arm()  # what remains of the exit (the interpreter's finalization) is watched too


def new_group(ranks: list[int] | None = None, stream: object = None) -> BaguaProcessGroup:
    """A process group over ``ranks`` (all ranks when None). Collective: every rank must call it.
    ``stream``: the CUDA stream of its communication (None: the default group's)."""
    get_default_group()
    world = dist.get_world_size()
    if ranks is None:
        ranks = list(range(world))
    ranks = sorted(set(int(r) for r in ranks))
    if not ranks or ranks[0] < 0 or ranks[-1] >= world:
        raise ValueError(f"new_group ranks must be a non-empty subset of 0..{world - 1}, got {ranks}")
    torch_group = dist.group.WORLD if len(ranks) == world else _new_torch_group(ranks)
    stream = stream if stream is not None else get_default_group().stream
    return BaguaProcessGroup(ranks, stream, _next_name(), torch_group=torch_group if dist.get_rank() in ranks else None)


def from_torch_group(group: dist.ProcessGroup, stream: object = None) -> BaguaProcessGroup:
    """Wrap an existing torch process group. Collective over the whole job (sub-groups are created)."""
    get_default_group()
    ranks = dist.get_process_group_ranks(group) if group is not dist.group.WORLD else list(range(dist.get_world_size()))
    stream = stream if stream is not None else get_default_group().stream
    return BaguaProcessGroup(ranks, stream, _next_name(), torch_group=group)


def rank_not_in_group(group: BaguaProcessGroup | None = None) -> bool:
    """Whether this process is outside ``group`` (the default group when None): collectives over it
    return there without doing anything."""
    group = group if group is not None else get_default_group()
    return dist.get_rank() not in group.ranks


class _PatchedGroups(MutableMapping):
    """torch process group -> its bagua group, for the groups torch still knows: an entry leaves when
    torch destroys its group (``torch.distributed.destroy_process_group()``), as the original's weak map
    empties then. Checked on every access, so nothing waits for the garbage collector (the bagua group
    holds the torch group, which a weak map would keep alive)."""

    def __init__(self) -> None:
        self._groups: dict[dist.ProcessGroup, BaguaProcessGroup] = {}

    def _prune(self) -> None:
        for group in [g for g in self._groups if not _torch_knows(g)]:
            del self._groups[group]

    def __getitem__(self, group: dist.ProcessGroup) -> BaguaProcessGroup:
        self._prune()
        return self._groups[group]

    def __setitem__(self, group: dist.ProcessGroup, bagua_group: BaguaProcessGroup) -> None:
        self._groups[group] = bagua_group

    def __delitem__(self, group: dist.ProcessGroup) -> None:
        del self._groups[group]

    def __iter__(self) -> Iterator[dist.ProcessGroup]:
        self._prune()
        return iter(list(self._groups))

    def __len__(self) -> int:
        self._prune()
        return len(self._groups)

    def __contains__(self, group: object) -> bool:
        self._prune()
        return group in self._groups

    def clear(self) -> None:
        self._groups.clear()


def _torch_knows(group: dist.ProcessGroup) -> bool:
    if not dist.is_initialized():
        return False
    try:
        dist.get_process_group_ranks(group)
    except (KeyError, ValueError, RuntimeError):
        return False
    return True


torch_to_bagua_pg_map: MutableMapping = _PatchedGroups()
"""The bagua group of each torch process group given to :func:`bagua_group_of` (the original's
``ProcessGroup.bagua_patch()``, which ``bagua.torch_api`` adds) and not yet destroyed by torch."""


def bagua_group_of(group: dist.ProcessGroup, stream: object = None) -> BaguaProcessGroup:
    """The bagua group of the torch process group ``group``, made once (collective over the whole job the first
    time) and kept until torch destroys ``group``.

    Example::

        >>> torch_group = torch.distributed.new_group([0, 1])
        >>> bagua_group_of(torch_group).get_global_communicator().nranks()
        2
    """
    if group not in torch_to_bagua_pg_map:
        torch_to_bagua_pg_map[group] = from_torch_group(group, stream)
    return torch_to_bagua_pg_map[group]


def before_destroy(fn: Callable[[], None]) -> None:
    """Run ``fn()`` at the start of every :func:`destroy_process_group` (so at exit too) while the groups still
    work, unless this rank's job failed: what a layer above must finish with its peers first (the wrapped
    modules' shutdown). Registered once per ``fn``."""
    if fn not in _before_destroy:
        _before_destroy.append(fn)


def destroy_process_group() -> None:
    """Stop the default group and torch.distributed (tests and clean shutdown). Also runs at exit.

    Process groups kept alive by reference cycles (a wrapped module's hooks, DDP's reducer) are
    collected here too, and the references bagua and torch keep beyond their lifetime are dropped
    (:mod:`~bagua_core.runtime.group_teardown`): destroyed later, during interpreter finalization,
    their backend threads can be killed while taking the GIL, which aborts the process ("terminate
    called without an active exception") after all its work is done. The modules still wrapped are shut
    down first (:func:`before_destroy`); past ``BAGUA_EXIT_TIMEOUT_S`` in the teardown that follows, the process
    dumps its threads' stacks and exits with status 1 (:mod:`~bagua_core.runtime.exit_watch`)."""
    global _default_group
    if failure.record.state.failure is None and _default_group is not None:
        for fn in list(_before_destroy):  # (their own pace: a join waits for the peers' last rounds)
            fn()
    with exit_watch.watching():  # a hang below bagua (torch's destroy) dumps the stacks and exits
        failed = failure.record.state.failure is not None
        failure.stop()  # after this rank's own failure: lingers until the peers learned it
        torch_groups = [dist.group.WORLD] if dist.is_initialized() else []
        for group in list(_all_groups):
            torch_groups += group.torch_groups()
            group.release(wait=not failed)
        if failed:
            group_teardown.keep(torch_groups)  # destroying them would wait for collectives a lost peer never joins
        group_teardown.forget_group_defaults(torch_groups)
        _all_groups.clear()
        torch_to_bagua_pg_map.clear()
        _default_group = None
        small_allreduce.threshold_bytes = 0
        if dist.is_initialized():
            dist.destroy_process_group()  # returns at once even with collectives in flight (after a failure)
        gc.collect()
