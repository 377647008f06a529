"""The per-replica runtime of fault-tolerant mode: torchft's ``Manager`` and the step transaction.

Each training step of a wrapped module is a transaction:

1. before the first forward of the step (a forward pre-hook that runs before bagua's own), the replica
   asks the lighthouse for the step's quorum (``Manager.start_quorum``); a joiner is checked against the
   quorum and healed from a live peer there (:mod:`~bagua_features.fault_tolerance.state`); when the quorum
   changed, the algorithm is reified again on the new quorum's group
   (:class:`~bagua_features.fault_tolerance.quorum_group.QuorumGroup`) with its state carried over, so what it
   derives from the participants is derived from this quorum;
2. the collectives between replicas run on the quorum's managed group, which reports an error to the
   Manager instead of raising (:mod:`~bagua_features.fault_tolerance.managed_group`);
3. ``optimizer.step()`` ends the impl's background communication of the step (``AlgorithmImpl.quiesce``;
   also before 1.), then asks ``Manager.should_commit``: where the algorithm declares
   ``commit="before_optimizer_step"`` before stepping (a failed step is simply not stepped), else after
   the step and its post-step communication, restoring the copy taken at 1. when the step failed. The
   step counter and the algorithm's state are restored on every survivor alike, so a failed step is
   committed nowhere.

An algorithm declaring ``commit="at_round"`` (one that communicates in rounds of several steps) makes a round
the transaction instead of a step: the copy of 1. is taken before the round's first step only; the quorum of
1. is joined before the step whose end starts the round's exchange (``AlgorithmImpl.round_syncs``, asked
before every step; also before a round's first step when there is no quorum yet: the first step, after a
failed round), so the exchange runs between the replicas alive then; after every step the runtime asks the
impl whether the step ended the round (``AlgorithmImpl.round_ends``): a step that did not is closed with no
commit decision, and the step that did is decided as in 3., restoring the copy taken before the round's first
step on every survivor when the round failed. A joiner healed inside its healer's round takes the healer's copy
of the round's start with the state, so that it goes back where the others do. The data position advances with
each step of the round and goes back with the copy. The replicas' rounds may differ in steps (rounds bounded in
time give a fast replica more), and so may their data positions: before the round's commit decision the quorum
agrees on the furthest (epoch, position) any of its readers reached (one int64 MAX over the quorum's group; the
slots a slower reader did not reach in the round are not read in that epoch), which every replica takes when the
round commits. A quorum joined before a step that is then not taken (``end_without_step``: the epoch ended there)
stands for the next step, which joins none.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from bagua_core.api import record_payload
from bagua_core.lifecycle.algorithm import switch_algorithm
from bagua_core.lifecycle.module_state import state_of
from bagua_core.lifecycle.tensor import register_shards
from bagua_core.runtime import env
from bagua_core.runtime.exceptions import BaguaConfigError, BaguaError
from bagua_features.fault_tolerance import events, standby
from bagua_features.fault_tolerance import state as ft_state
from bagua_features.fault_tolerance.hang import HangWatchdog
from bagua_features.fault_tolerance.managed_group import ManagedGroup
from bagua_features.fault_tolerance.options import FaultTolerantOptions, address_towards
from bagua_features.fault_tolerance.quorum_group import QuorumGroup

__all__ = ["FaultTolerantRuntime"]

_EPOCH_STRIDE = 1 << 40
"""A data position as one int64 for the quorum's MAX: ``epoch * _EPOCH_STRIDE + position`` (positions < 2**40)."""

logger = logging.getLogger("bagua.fault_tolerance")
_FAULT_RANK = {"quorum_changed": 0, "step_failed": 1, "replica_lost": 2}
"""A fault's kinds, by how near its cause they are (``FaultTolerantRuntime._note_fault``)."""


class _TransactionStep:
    """``optimizer.step`` under fault-tolerant mode: closes the step's transaction around ``original``,
    the step it wraps (the optimizer's own, or one an algorithm installed)."""

    __slots__ = ("runtime", "optimizer", "original")

    def __init__(self, runtime: FaultTolerantRuntime, optimizer: torch.optim.Optimizer, original: Any) -> None:
        self.runtime, self.optimizer, self.original = runtime, optimizer, original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.runtime._step(self.optimizer, self.original, args, kwargs)


def quiet_torchft_logs() -> None:
    """torchft's Python loggers at warning level (unless ``BAGUA_VERBOSE``), its CPU-only warnings dropped
    (no NCCL flight recorder to reset; a read-only buffer it serialises from)."""
    if env.verbose():
        return
    for name in ("torchft", *(n for n in logging.root.manager.loggerDict if n.startswith("torchft."))):
        logging.getLogger(name).setLevel(logging.WARNING)
    if not torch.cuda.is_available():
        logging.getLogger("torchft.manager").addFilter(lambda record: "flight recorder" not in record.getMessage())
    warnings.filterwarnings("ignore", message="The given buffer is not writable", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torchft\.")  # its use of torch's pytree


_GLOO_ADVICE = re.compile(r"\s*This is typically caused by a remote worker crashing\..*$|\s*GLHF!.*$")
"""What torch appends to gloo's error on a peer's crash ("... Check the logs of the remote worker before
reporting an error. GLHF! 🏖️"): in fault-tolerant mode a peer's crash is expected, and bagua says so."""


def _one_line(error: object) -> str:
    """The cause of a torchft error in one line: its original exception's message, without gloo's source
    path (``[.../pair.cc:537] Read error ...: Connection reset by peer`` -> ``Read error ...: Connection
    reset by peer``) and without torch's advice to read the crashed worker's logs."""
    cause = getattr(error, "original_exception", error)
    text = " ".join(str(cause).split()) or type(cause).__name__
    text = _GLOO_ADVICE.sub("", re.sub(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", text))
    return text if len(text) <= 200 else text[:197] + "..."


@contextlib.contextmanager
def _manager_server_on(host: str) -> Iterator[None]:
    """torchft's ``Manager`` starts its server on every interface (``[::]:port``): while one is built, its
    server listens on ``host`` only."""
    import torchft.manager as ft_manager

    serve = ft_manager.ManagerServer

    def bound(*args: Any, bind: str, **kwargs: Any) -> Any:
        port = bind.rsplit(":", 1)[1]
        return serve(*args, bind=f"[{host}]:{port}" if ":" in host else f"{host}:{port}", **kwargs)

    ft_manager.ManagerServer = bound
    try:
        yield
    finally:
        ft_manager.ManagerServer = serve


class FaultTolerantRuntime:
    """One replica's side of fault-tolerant training (module doc). Built by ``init_process_group``."""

    def __init__(self, options: FaultTolerantOptions) -> None:
        from torchft import Manager

        from bagua_features.fault_tolerance.replica_groups import ReplicaGroups

        quiet_torchft_logs()
        self.options = options
        timeout = timedelta(seconds=options.timeout_s)
        self.ft_group = ReplicaGroups(timeout=timeout)
        self.manager: Manager | None = None
        """torchft's manager: from the start, or for a warm standby (:mod:`.standby`) from its activation on."""
        if not standby.is_standby():
            self._start_manager()
        self.module: torch.nn.Module | None = None
        self.group: QuorumGroup | None = None
        self.quorum_id: int | None = None
        self._generation = 0
        """Counts the quorums configured: a group's errors count only while it is of the latest one."""
        self.fingerprint: dict[str, Any] = {}
        self.step_open = False
        self.round_open = False
        """``commit="at_round"``: a round's transaction is open (its copy taken); the next step continues it, joining a
        quorum only where ``round_syncs`` says."""
        self._joined_in_step = False
        """Whether the open step joined a quorum (or holds one, :attr:`_held_quorum`)."""
        self._held_quorum = False
        """``commit="at_round"``: a quorum was joined for a step that was not taken (``end_without_step``); the next
        step takes its place and joins none (its replicas are in that step's exchange)."""
        self._agreed_position: tuple[int, int] | None = None
        """``commit="at_round"``: the quorum's furthest (epoch, position) after the round (:meth:`_furthest_position`)."""
        self.decision: bool | None = None
        self.closed_transaction = False
        """Whether the last step that ended closed its transaction (asked the quorum to commit): every step,
        except under ``commit="at_round"``, where only the round's last step does."""
        self._saved: dict[str, Any] = {}
        self._healed_algorithm_state: dict[str, Any] | None = None
        self._healed_round_start: dict[str, Any] | None = None
        """A joiner healed inside its healer's round (``commit="at_round"``): the healer's copy of the round's start,
        which the joiner restores, as every replica of the round does, if the round fails."""
        self._shard_intra = None
        self._readers = (0, 1)
        """This rank's place among the quorum's readers of data (every rank of every replica) and their number."""
        self.data_position = 0
        """Samples of the epoch consumed by committed steps (``QuorumSampler``; healed with the state)."""
        self._batch_samples = 0
        self.data_epoch = 0
        self.stats = {"committed": 0, "discarded": 0, "quorums": 0, "healed": 0, "healed_bytes": 0, "heal_s": 0.0,
                      "replicas_lost": 0, "replicas_joined": 0, "first_commit_s": None, "standby": standby.is_standby()}
        """``healed_bytes``/``heal_s``: the tensor bytes of the states this replica was healed with and the
        seconds its heals took (all heals); ``replicas_lost``/``replicas_joined``: how many replicas left or
        joined the quorum as this replica saw it (a failure it survived, a replica that came back); ``standby``: this
        replica was a warm standby (``first_commit_s`` then counts from its activation)."""
        self.faults: list[dict[str, Any]] = []
        """What this replica went through, in order: ``{"kind", "step", ...}``; kinds ``replica_lost`` (a replica
        left the quorum), ``step_failed`` (a step or round discarded), ``quorum_changed`` (a new quorum of as many
        replicas: one replaced, one joined) with ``stall_s``, the seconds from the commit before it to the first
        commit after; ``healed`` (this replica healed from a live peer) with ``heal_s``."""
        self._fault: str | None = None  # the fault since the last commit (_note_fault)
        self._last_commit: float | None = None
        self._replicas: int | None = None
        self._started = time.monotonic()
        self._hook_handle = None
        self._reset: Callable[[torch.nn.Module], None] | None = None
        self._open_since: float | None = None
        self.watchdog = HangWatchdog(options.hang_timeout_s, lambda: self._open_since, lambda: self.options.replica_id)

    def _start_manager(self) -> None:
        from torchft import Manager
        from torchft.checkpointing.pg_transport import PGTransport

        options = self.options
        timeout = timedelta(seconds=options.timeout_s)
        # a joiner heals over the replicas' own group: no server hands the model to whoever asks
        transport = PGTransport(self.ft_group, timeout=timeout, device=torch.device("cpu"))
        host = options.host or address_towards(options.lighthouse)
        with _manager_server_on(host):
            self.manager = Manager(
                pg=self.ft_group, load_state_dict=self._load_healed, state_dict=self._healing_state,
                min_replica_size=options.min_replicas, use_async_quorum=False, timeout=timeout,
                quorum_timeout=timedelta(seconds=options.quorum_timeout_s), connect_timeout=timeout,
                rank=dist.get_rank(), world_size=dist.get_world_size(), lighthouse_addr=options.lighthouse,
                replica_id=options.replica_id, init_sync=True, hostname=host, checkpoint_transport=transport,
            )

    def _activate(self) -> None:
        """A warm standby's first step: wait until the launcher makes it a replica (or retires it: the process
        exits), then take that replica's id and start the manager; it then joins and heals as a restarted replica
        does. Its times count from the activation."""
        standby.wait_for_activation()
        self.options = self.options.model_copy(update={"replica_id": os.environ["BAGUA_FT_REPLICA_ID"]})
        self._started = time.monotonic()
        self._start_manager()
        logger.info("bagua: standby activated as replica %s", self.options.replica_id)

    # --- wiring -------------------------------------------------------------------------------------
    def attach(self, module: torch.nn.Module, reset: Callable[[torch.nn.Module], None]) -> None:
        """Make ``module`` (just wrapped by ``with_bagua``) train under the step transaction; ``reset(module)``
        rebuilds its tensors, buckets and operations (on a new quorum's group). Raises ``BaguaConfigError`` for an
        algorithm that declares no fault tolerance."""
        policy = state_of(module).capabilities.fault_tolerance
        if policy is None:
            from bagua_core.plugins import algorithm_registry

            able = sorted(name for name in algorithm_registry.names()
                          if algorithm_registry.get(name).capabilities.fault_tolerance is not None)
            name = state_of(module).declaration.name
            raise BaguaConfigError(
                f"algorithm {name!r} cannot run in fault-tolerant mode: it declares no "
                f"Capabilities.fault_tolerance (what a joiner heals from a live peer, what it re-derives from each "
                f"quorum, where a step commits); fault-tolerant algorithms: {', '.join(able)}; or run without "
                f"--fault-tolerant"
            )
        declaration = state_of(module).declaration
        options = declaration.canonical_options()
        for option, value, why in policy.unsupported:
            if options.get(option) == value:
                raise BaguaConfigError(f"algorithm {declaration.name!r} with {option}={value!r} cannot run in "
                                       f"fault-tolerant mode: {why}")
        if self.module is not None and self.module is not module and self._hook_handle is not None:
            self._hook_handle.remove()
        self.module = module
        self.policy = policy
        self.fingerprint = ft_state.fingerprint(module)
        # a model sharded with FSDP2 over this replica's ranks (the module's layout): the algorithm runs between
        # the ranks holding the same shard in each replica (torchft's group between the same rank of every
        # replica), and a joiner's rank heals its shards from the same rank of a live replica
        if self._layout is not None:  # this rank alone: each rank is a node of its shard's group
            intra = state_of(module).process_group.get_intra_node_communicator()
            self._shard_intra = (intra.torch_group, intra.global_ranks, intra.group_ranks)
        self.quorum_id = None  # the next step reifies the algorithm on its quorum
        self.round_open = False  # and starts a transaction (a round) of its own
        self._hook_handle = module.register_forward_pre_hook(self._forward_pre_hook, prepend=True)
        self._reset = reset
        for optimizer in state_of(module).optimizers:
            self._wrap_step(optimizer)

    def _wrap_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Make ``optimizer.step()`` close the step's transaction, over whatever step the optimizer has
        now: its own, or one the algorithm installed (an algorithm stepping inside backward silences it;
        re-reified on a new quorum it installs its step again, and this wraps the new one)."""
        current = optimizer.step
        original = current.original if isinstance(current, _TransactionStep) else current  # wrap what that wraps
        optimizer.step = _TransactionStep(self, optimizer, original)

    @property
    def _layout(self) -> Any:
        """The wrapped module's shard layout (``ModuleState.shard``), None for a replicated model."""
        state = state_of(self.module) if self.module is not None else None
        return state.shard if state is not None else None

    def _forward_pre_hook(self, module: torch.nn.Module, inputs: Any) -> None:
        if module.training and torch.is_grad_enabled() and not self.step_open:
            self.begin_step(module)

    # --- the transaction ----------------------------------------------------------------------------
    def begin_step(self, module: torch.nn.Module) -> None:
        """Join the step's quorum (healing if behind), re-derive on a new quorum, keep what a failure
        would have to restore. ``commit="at_round"``: the copy is taken before a round's first step only, and
        the quorum joined only before a step whose end starts the round's exchange (``round_syncs``; also
        before a round's first step when there is no quorum yet: the first step, after a failed round)."""
        if self.manager is None:  # a warm standby, needed now
            self._activate()
        self.step_open, self.decision = True, None
        if self._layout is not None:  # the step's copy and a heal hold the shards (not an eval's unsharded)
            register_shards(module)
        at_round = self.policy.commit == "at_round"
        held, self._held_quorum = at_round and self._held_quorum, False
        syncs = at_round and (held or self._round_syncs(module))
        self._joined_in_step = syncs
        if self.round_open:
            if syncs and not held and self._join_quorum(module):  # healed inside the round: its start is the healer's
                self._take_copy(module)
            self._open_since = time.monotonic()
            return
        if not held and (not at_round or syncs or self.quorum_id is None):
            self._join_quorum(module)
            self._joined_in_step = True
        self._take_copy(module)
        self.round_open = at_round
        self._open_since = time.monotonic()

    def _take_copy(self, module: torch.nn.Module) -> None:
        """What a failed transaction goes back to: a copy of the state now, or, healed inside a round, the
        healer's copy of the round's start (``_healing_state``)."""
        if self._healed_round_start is not None:
            self._saved, self._healed_round_start = self._healed_round_start, None
            return
        parts = ("algorithm_state", "step") if self.policy.commit == "before_optimizer_step" else \
            ("weights", "optimizer", "algorithm_state", "step")
        self._saved = ft_state.capture(module, parts)
        self._saved["data_position"], self._saved["data_epoch"] = self.data_position, self.data_epoch

    def _join_quorum(self, module: torch.nn.Module) -> bool:
        """The lighthouse's quorum (a joiner heals in it); a new one reconfigures the group and the impl.
        Returns whether this replica was healed in it."""
        self._quiesce(module)  # nothing of the impl's may run on the group while the quorum reconfigures it
        started = time.monotonic()
        healed, healed_bytes = self.stats["healed"], self.stats.get("healed_bytes", 0)
        self.manager.start_quorum()
        if self.stats["healed"] != healed:  # this quorum healed us: the state came with it
            seconds, step = time.monotonic() - started, self.manager.current_step()
            self.stats["heal_s"] += seconds
            if step:  # (at step 0 replicas starting together take the first's weights: not a heal)
                self.faults.append({"kind": "healed", "step": step, "heal_s": seconds})
            if dist.get_rank() == 0:  # one report per replica, to bagua run --fault-tolerant
                events.report("healed", step=step, seconds=seconds, bytes=self.stats["healed_bytes"] - healed_bytes)
        if self.ft_group.quorum_id != self.quorum_id:
            self._on_new_quorum(module)
        return self.stats["healed"] != healed

    def _note_fault(self, kind: str) -> None:
        """Name the fault since the last commit by its cause: a lost replica over the step it failed, and that over
        a new quorum of as many replicas (a replaced one, a joiner)."""
        if _FAULT_RANK[kind] > _FAULT_RANK.get(self._fault, -1):
            self._fault = kind

    def _on_new_quorum(self, module: torch.nn.Module) -> None:
        self.quorum_id = self.ft_group.quorum_id
        self.stats["quorums"] += 1
        rank, size = self.manager.participating_rank(), self.manager.num_participants()
        per_replica, local = dist.get_world_size(), dist.get_rank()
        replica, replicas = (rank if rank is not None else 0), max(size, 1)
        if self._replicas is not None:
            self._note_fault("replica_lost" if replicas < self._replicas else "quorum_changed")
            self.stats["replicas_lost"] += max(0, self._replicas - replicas)
            self.stats["replicas_joined"] += max(0, replicas - self._replicas)
        self._replicas = replicas
        self._generation += 1
        self._readers = (replica * per_replica + local, replicas * per_replica)  # every rank reads its own batch
        on_error = functools.partial(self._on_group_error, self._generation)
        layout = self._layout
        if layout is not None:  # the same shard in every replica: torchft's group of this rank's peers
            everyone = ManagedGroup(self.ft_group.same_rank_inner(), replica, replicas,
                                    f"bagua_ft_quorum{self.quorum_id}_shard{layout.index}", on_error)
        else:
            everyone = ManagedGroup(self.ft_group.everyone_inner(), replica * per_replica + local,
                                    replicas * per_replica, f"bagua_ft_quorum{self.quorum_id}", on_error)
        leaders = None
        if per_replica > 1 and local == 0 and layout is None:
            leaders = ManagedGroup(self.ft_group.same_rank_inner(), replica, replicas,
                                   f"bagua_ft_quorum{self.quorum_id}_leaders", on_error)
        if rank is None or self.manager.errored() is not None or everyone._inner is None or \
                (leaders is not None and leaders._inner is None):
            reason = RuntimeError(f"quorum {self.quorum_id} could not be configured: {self.manager.errored()}")
            for managed in (everyone, leaders):
                if managed is not None:
                    managed.fail(reason)
        old = self.group
        if old is not None:
            old.release(wait=False)
        if layout is not None:
            self.group = QuorumGroup(everyone, None, replica, replicas, 1, self.quorum_id, intra=self._shard_intra)
        else:
            self.group = QuorumGroup(everyone, leaders, replica, replicas, per_replica, self.quorum_id)
        carried = self._healed_algorithm_state
        if carried is None:
            carried = ft_state.copy_tree(state_of(module).impl.state_dict())
        self._healed_algorithm_state = None
        state_of(module).impl.shutdown(module)
        switch_algorithm(module, impl=state_of(module).declaration.reify(self.group), process_group=self.group)
        self._reset(module)  # steps 2-4 of the lifecycle on the new group
        for optimizer in state_of(module).optimizers:  # the new impl may have installed its own step
            self._wrap_step(optimizer)
        if carried:
            state_of(module).impl.load_state_dict(carried)
        logger.info("bagua: replica %s joined quorum %s as replica %s of %s (step %s)", self.options.replica_id,
                    self.quorum_id, replica, replicas, self.manager.current_step())

    def _on_group_error(self, generation: int, exc: Exception) -> None:
        """A collective between replicas failed: the step fails, and every group of the quorum lets go of its
        gloo group now (torchft's reference too: the next quorum configures new ones), which closes this
        replica's connections so that the peers waiting on it fail at once (``managed_group``'s module doc).
        An error of an earlier quorum's group (an operation it abandoned, finishing late) is only logged: it
        must not fail the current quorum's step nor release its groups."""
        if generation != self._generation:
            logger.info("bagua: replica %s ignores an error of an earlier quorum's group: %s", self.options.replica_id,
                        exc)
            return
        self.manager.report_error(exc)
        for managed in self.group.managed_groups if self.group is not None else ():
            managed.release()
        self.ft_group.abort(errored=False)

    def _step(self, optimizer: torch.optim.Optimizer, original: Any, args: tuple, kwargs: dict) -> Any:
        if not self.step_open:  # a step outside a training forward: not a transaction
            return original(*args, **kwargs)
        module = self.module
        state = state_of(module)
        result = None
        if self.policy.commit == "before_optimizer_step":
            if self.decision is None:
                self._quiesce(module)
                self.decision = self._should_commit()
            if self.decision:
                result = original(*args, **kwargs)
        else:
            result = original(*args, **kwargs)
        state.mark_stepped(optimizer)  # (the core's step hook marked it where the optimizer stepped)
        last = state.step_over
        if last and self.policy.commit == "at_round" and not self._round_ends(module):
            self._close_inner_step()
            return result
        if self.policy.commit != "before_optimizer_step":
            if last:
                self._quiesce(module)
                if self.policy.commit == "at_round":
                    self._agreed_position = self._furthest_position()
                self.decision = self._should_commit()
        if last:
            self._close(module)
        return result

    def _round_syncs(self, module: torch.nn.Module) -> bool:
        """``AlgorithmImpl.round_syncs`` (before the step's forward): whether the step's end starts the round's
        exchange, so the quorum is joined first. Its exception fails the round (no quorum is joined for it: a
        quorum would clear the error)."""
        try:
            return bool(state_of(module).impl.round_syncs(module))
        except Exception as exc:
            logger.warning("bagua: round_syncs of replica %s failed: %s", self.options.replica_id, exc)
            self.manager.report_error(exc)
            return False

    def _round_ends(self, module: torch.nn.Module) -> bool:
        """``AlgorithmImpl.round_ends`` (after the step-end hook ran): whether this step ends the round. Its
        exception fails the round, which then ends here."""
        try:
            return bool(state_of(module).impl.round_ends(module))
        except Exception as exc:
            logger.warning("bagua: round_ends of replica %s failed: %s", self.options.replica_id, exc)
            self.manager.report_error(exc)
            return True

    def _furthest_position(self) -> tuple[int, int]:
        """``commit="at_round"``, at the round's last step: the furthest (epoch, position) of the quorum's readers
        after it (module doc), agreed over the quorum's group before the commit decision (a failure there is
        reported to the Manager and fails the round)."""
        position = self.data_epoch * _EPOCH_STRIDE + self.data_position + self._batch_samples * self._readers[1]
        value = torch.tensor([position], dtype=torch.int64)
        if self.group is not None and self.group.managed.size() > 1:
            record_payload("allreduce", value)  # counted as every collective is (the step's step/bytes)
            dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.group.managed)
        agreed = max(int(value), position)  # (a failed collective leaves the buffer as it was)
        return agreed // _EPOCH_STRIDE, agreed % _EPOCH_STRIDE

    def _should_commit(self) -> bool:
        """The step's decision, agreed by the replica's ranks and then by the quorum. A rank whose collective
        failed at once (a peer's connection closed) asks while a sibling may still wait up to ``timeout_s`` for
        its own to time out: the decision waits twice that before it gives up on a sibling."""
        for managed in self.group.managed_groups if self.group is not None else ():
            if managed.error is not None and self.manager.errored() is None:
                self.manager.report_error(managed.error)
        wait_s = 2 * self.options.timeout_s
        try:
            return bool(self.manager.should_commit(timeout=timedelta(seconds=wait_s)))
        except TimeoutError as exc:
            raise BaguaError(
                f"the commit decision of replica {self.options.replica_id} (rank {dist.get_rank()}) did not complete "
                f"within {wait_s:g} s (2 x BAGUA_FT_TIMEOUT_S): another rank of this replica did not reach "
                f"optimizer.step() (hung, much slower, or it stepped a different number of optimizers) or the "
                f"replica's rank 0 is gone ({exc})") from exc

    def _quiesce(self, module: torch.nn.Module) -> None:
        """The impl's background communication ends here (``AlgorithmImpl.quiesce``); its failure fails the step."""
        try:
            state_of(module).impl.quiesce(module)
        except Exception as exc:
            logger.warning("bagua: background communication of replica %s failed: %s", self.options.replica_id, exc)
            self.manager.report_error(exc)

    def end_without_step(self) -> None:
        """The step's quorum was joined but nothing is trained in it (the epoch ended); an open round stays
        open (the next step continues it)."""
        if self.module is not None:
            self._quiesce(self.module)
        self._held_quorum = self.policy.commit == "at_round" and self._joined_in_step
        self.step_open, self._open_since = False, None

    def _close_inner_step(self) -> None:
        """A step of the open round that does not end it: no decision is asked; it stands unless the round
        fails (``last_step_committed()`` is True), and its samples count until then."""
        self.step_open, self._open_since = False, None
        self.decision, self.closed_transaction = True, False
        self.data_position += self._batch_samples * self._readers[1]

    def _close(self, module: torch.nn.Module) -> None:
        self.step_open, self._open_since = False, None
        self.round_open, self.closed_transaction = False, True
        if self.decision:
            self.stats["committed"] += 1
            now = time.monotonic()
            if self._fault is not None and self._last_commit is not None:  # the stall the fault cost this replica
                self.faults.append({"kind": self._fault, "step": self.manager.current_step(),
                                    "stall_s": now - self._last_commit})
            self._fault, self._last_commit = None, now
            if self._agreed_position is not None:  # commit="at_round": the quorum's furthest
                self.data_epoch, self.data_position = self._agreed_position
            else:
                self.data_position += self._batch_samples * self._readers[1]
            self._agreed_position = None
            if self.stats["first_commit_s"] is None:
                self.stats["first_commit_s"] = time.monotonic() - self._started
            return
        self.stats["discarded"] += 1
        self._note_fault("step_failed")
        self._agreed_position = None
        ft_state.restore(module, self._saved)
        self.data_position, self.data_epoch = self._saved["data_position"], self._saved["data_epoch"]
        what = "round" if self.policy.commit == "at_round" else "step"
        logger.warning("bagua: %s discarded on replica %s: a participant failed (%s); the quorum forms again", what,
                       self.options.replica_id, _one_line(self.manager.errored()))
        self.quorum_id = None  # the next step reconfigures even if the lighthouse kept the quorum id

    # --- healing ------------------------------------------------------------------------------------
    def _healing_state(self) -> dict[str, Any]:
        """Sent to a joiner by a live peer (at the start of a step, before anything of it changed)."""
        module = self.module
        if module is None:
            return {"fingerprint": {}}
        saved = ft_state.capture(module, self.policy.heals, per_replica=self.policy.per_replica_state)
        healing = {"fingerprint": self.fingerprint, "state": saved, "data_position": self.data_position,
                   "data_epoch": self.data_epoch}
        if self.round_open:  # inside a round: the joiner also takes its start, where a failed round goes back to
            own = set(self.policy.per_replica_state)
            start = dict(self._saved)
            if "algorithm_state" in start:  # (the joiner keeps its own per-replica state there too)
                start["algorithm_state"] = {k: v for k, v in start["algorithm_state"].items() if k not in own}
            healing["round_start"] = start
        return healing

    def _load_healed(self, healed: dict[str, Any]) -> None:
        module = self.module
        ft_state.check_joiner(self.fingerprint, healed["fingerprint"])
        saved = healed["state"]
        ft_state.restore(module, saved, algorithm=False)
        self._healed_algorithm_state = saved.get("algorithm_state")
        self._healed_round_start = healed.get("round_start")
        self.data_position = int(healed.get("data_position", 0))
        self.data_epoch = int(healed.get("data_epoch", 0))
        self.quorum_id = None  # rebuild the algorithm on this quorum and load the healed state into it
        self.stats["healed"] += 1
        self.stats["healed_bytes"] += ft_state.tree_bytes(saved) + ft_state.tree_bytes(healed.get("round_start"))
        logger.info("bagua: replica %s healed from a live peer at step %s", self.options.replica_id,
                    self.manager.current_step())

    # --- data ---------------------------------------------------------------------------------------
    def shard(self, batch_size: int) -> tuple[int, int, int]:
        """``(start, replica_rank, replicas)`` for this step's batch: the step reads samples
        ``start + replica_rank * batch_size`` onward of the epoch's order (``QuorumSampler``)."""
        if not self.step_open:  # the quorum decides the shard: join it before the batch is read
            self.begin_step(self.module)
        self._batch_samples = batch_size
        rank, size = self._readers
        return self.data_position, rank, size

    def shutdown(self) -> None:
        self.watchdog.stop()
        if self.manager is not None:
            self.manager.shutdown(wait=False)
