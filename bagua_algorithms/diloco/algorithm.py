"""``diloco``: DiLoCo and Streaming DiLoCo (Douillard et al., 2023 and 2025) on the core's lifecycle.

Each rank takes ``inner_steps`` (H) steps with the user's optimizer on its own data, communicating
nothing. Then the pseudo-gradient ``delta = x_start - x_local`` is averaged over the ranks and an outer
optimizer (SGD, Nesterov momentum; lr 0.7, momentum 0.9) steps ``x_start`` with it; every rank continues
from the new ``x_start``. The inner optimizers keep their state across rounds.

Rounds bounded in time (``round_seconds``, :mod:`.timed`): a replica ends its round at the inner step whose end
is nearest ``round_seconds`` of training since the round's first forward, so a fast replica takes more inner
steps than a slow one; it sends the round without waiting and merges it once landed, keeping what it trained
meanwhile, and the merge weights each replica's pseudo-gradient by the samples it trained on in the round:
``sum_r n_r * delta_r / sum_r n_r``. At shutdown a replica joins the rounds the others still run.

Overlapped rounds (``overlap_steps`` tau > 0, not streaming): the round's exchange travels during tau inner steps
and the merge keeps them, ``x = x_start' + (x_now - x_sent)``; ``eager`` continues meanwhile from a proxy outer
step (:mod:`.eager`). The exchanges run on a thread of their own (:mod:`.courier`).

Streaming (``streaming=True``): the parameters are cut into ``fragments`` (:mod:`.fragments`) that are
synchronised on staggered schedules, H steps apart each; a fragment's exchange stays in flight during
the next ``overlap_steps`` inner steps and its outer result is then mixed in,
``x = mixing * x_local + (1 - mixing) * x_start``. ``compression`` sends the outer gradients through a
codec with error feedback (:mod:`.exchange`), e.g. 4 bits with "MinMaxUInt4".

Communicated: nothing during the inner steps (after ``warmup_steps`` steps of the core's warmup, plain
gradient allreduce: ``warming_up``);
every H steps each fragment's fp32 pseudo-gradient is allreduced, or its encoding allgathered, on a
process group of the algorithm's own (creating it is collective: every process wraps its model).
Events run after the optimizer step of their inner step (or, if that step's optimizer did not run, at
the next forward), in the same order on every rank. Checkpoints carry the outer state, the residuals,
what is in flight and each rank's local parameters and inner optimizer state: resuming is exact.

Example::

    >>> model = model.with_bagua([adamw], {"name": "diloco", "inner_steps": 50})
    >>> model = model.with_bagua([adamw], {"name": "diloco", "round_seconds": 20.0})
    >>> model = model.with_bagua([adamw], {"name": "diloco", "inner_steps": 50, "overlap_steps": 5, "eager": True})
    >>> model = model.with_bagua([adamw], {"name": "diloco", "streaming": True, "compression": "MinMaxUInt4"})
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.distributed as dist

from bagua_algorithms.diloco.config import DiLoCoConfig
from bagua_algorithms.diloco.courier import Courier
from bagua_algorithms.diloco.eager import others_of, proxy_gradient, proxy_step
from bagua_algorithms.diloco.exchange import FragmentExchange
from bagua_algorithms.diloco.fragments import Schedule, gather_flat, scatter_flat, split_fragments, subtract_flat
from bagua_algorithms.diloco.state import restore, state_of
from bagua_algorithms.diloco.timed import (RoundProgress, agree_to_end, record_weights, replica_samples,
                                          replica_weights)
from bagua_core.api import (
    Algorithm,
    AlgorithmImpl,
    Capabilities,
    FaultTolerance,
    RoundCount,
    WrappedModule,
    first_failure,
    shard_group,
    tensors,
)
from bagua_core.codecs import get_codec

__all__ = ["DiLoCoAlgorithm", "DiLoCoAlgorithmImpl", "RoundOptions"]


class RoundOptions(Protocol):
    """What the round of :class:`DiLoCoAlgorithmImpl` reads of its config (``DiLoCoConfig`` has it; an algorithm
    built on the round gives the same names, fixed ones as properties). An impl that overrides
    :meth:`~DiLoCoAlgorithmImpl.new_exchange` and :meth:`~DiLoCoAlgorithmImpl.new_outer` reads nothing else."""

    inner_steps: int
    warmup_steps: int
    mixing: float
    round_seconds: float | None
    eager: bool

    @property
    def fragment_count(self) -> int: ...

    @property
    def overlap(self) -> int: ...

    @property
    def keeps_progress(self) -> bool:
        """Whether a merge after an overlap keeps what the replica trained meanwhile (``x = theta' + (x_now -
        x_sent)``) rather than mixing the outer result in (streaming's ``mixing``)."""
        ...


class DiLoCoAlgorithmImpl(AlgorithmImpl):
    """Inner steps with nothing communicated, then each fragment's outer step (module docstring)."""

    config: DiLoCoConfig

    def __init__(self, process_group: Any, config: RoundOptions) -> None:
        super().__init__(process_group, config)
        self.nranks = len(process_group.ranks)
        # on a quorum (fault-tolerant mode) its group is the only one between replicas: no new group
        membership = process_group.membership
        self.fault_tolerant = membership.on_quorum
        self.group = membership.between_replicas if self.fault_tolerant else process_group.new_channel()  # collective
        self.schedule = Schedule(config.inner_steps, config.fragment_count, config.overlap)
        self._module: torch.nn.Module | None = None
        """The wrapped module (its step counter is the schedule's), set when the core asks :meth:`warming_up`."""
        self.step_offset = 0
        """Added to the module's step counter (a resumed run continues the saved schedule)."""
        self.fragments: list[list[torch.Tensor]] = []
        self.starts: list[torch.Tensor] = []
        self.deltas: list[torch.Tensor] = []
        self.exchanges: list[FragmentExchange] = []
        self.outer: torch.optim.Optimizer | None = None
        self.done_through = 0
        """The inner steps whose events have run."""
        self.pending: dict[int, int] = {}
        """fragment -> the inner step after which its exchange is merged."""
        self.landed: dict[int, torch.Tensor] = {}
        """fragment -> its averaged outer gradient, already received (across a checkpoint)."""
        self.timed = RoundProgress(config.round_seconds) if config.round_seconds is not None else None
        """Rounds bounded in time (:mod:`.timed`): this replica's progress in the round; None: rounds of H steps."""
        self.shard_peers: Any = None
        """The ranks sharding the model with this one (they agree on when a timed round ends), or None."""
        self.replica_peers: Any = None
        """Fault-tolerant mode: the other ranks of this replica (they join each quorum together, so they agree on the
        step that ends a timed round), or None for a replica of one rank."""
        self.last_weights: list[float] | None = None
        """The weights of the last timed merge, in group order (``w_r = R * n_r / N``)."""
        self.merged = RoundCount(0, 0)
        """The fragments' outer steps this impl ran, and their fp32 bytes (``rounds_completed``)."""
        self.merges_asked = 0
        """``merged.rounds`` when :meth:`round_ends` last answered."""
        overlapped = self.schedule.overlap > 0 or self.timed is not None
        self.courier = Courier() if overlapped and not self.fault_tolerant else None
        """With an overlap, and with rounds bounded in time: the thread the exchanges run on (encoding, collective,
        decoding), off the training thread. Fault-tolerant mode runs them on the training thread (its round's copy
        holds what is in flight), where the replicas meet at each timed round's end (:meth:`_end_of_timed_step`)."""
        self.all_done = False
        """Rounds bounded in time: whether every replica was done in the last round landed (the join at shutdown)."""
        self.futures: dict[int, Any] = {}
        """fragment -> the Future of its exchange on the courier (average, contribution)."""
        self.anchors: dict[int, torch.Tensor] = {}
        """fragment -> the weights it continued from when it sent (``x_sent``, or eager's ``theta~``): a merge that
        keeps progress adds ``x_now - anchor`` to the outer result."""
        self.contributions: dict[int, torch.Tensor] = {}
        """Eager: fragment -> what this replica's part of its landed exchange decoded to."""
        self.others: dict[int, torch.Tensor] = {}
        """Eager: fragment -> what the other replicas sent in its last merged round, summed (:mod:`.eager`)."""

    # --- phases ------------------------------------------------------------------------------------
    def train_step(self) -> int:
        return (WrappedModule(self._module).train_step_counter if self._module is not None else 0) + self.step_offset

    def inner_step(self) -> int:
        return self.train_step() - self.config.warmup_steps

    def warming_up(self, bagua_module: torch.nn.Module) -> bool:
        """The first ``warmup_steps`` steps (counted with a resumed run's :attr:`step_offset`) are the core's
        warmup, plain gradient allreduce; the inner steps begin after them. (The core asks it at every rebuild,
        the wrap's first: the impl keeps ``bagua_module``, whose step counter is the schedule's.)"""
        self._module = bagua_module
        return self.config.warmup_steps > 0 and self.inner_step() <= 0

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        """Nothing: the inner steps send nothing in backward (the first call begins the inner phase)."""
        if not self.starts:
            self._begin_inner(bagua_module)
        return []

    def init_backward_hook(self, bagua_module: torch.nn.Module) -> Callable[[str, torch.nn.Parameter], None]:
        def hook(parameter_name: str, parameter: torch.nn.Parameter) -> None:
            return None  # no buckets

        return hook

    def _begin_inner(self, bagua_module: torch.nn.Module) -> None:
        # this rank's weights (a model sharded with FSDP2: its shards, whose pseudo-gradients the ranks holding
        # the same shards average)
        params = [tensors.local_shard(p) for _, p in WrappedModule(bagua_module).named_parameters()]
        self.fragments = [[params[i] for i in indices] for indices in split_fragments(params, self.schedule.count)]
        self.starts = [gather_flat(f, torch.empty(sum(p.numel() for p in f), device=f[0].device))
                       for f in self.fragments]  # fp32, on the parameters' device
        self.exchanges = [self.new_exchange(f, s) for f, s in zip(self.fragments, self.starts)]
        # each fragment's outer gradient is built in the same buffer every round (a new one would be page-faulted
        # in each round: a third of a round's copies); an exchange is done with it when the fragment merges
        self.deltas = [torch.empty_like(start) for start in self.starts]
        self.outer = self.new_outer(self.starts)
        self.shard_peers = shard_group(bagua_module)
        self.replica_peers = self.shard_peers
        if self.fault_tolerant and self.shard_peers is None and dist.get_world_size() > 1:
            self.replica_peers = dist.group.WORLD  # (fault-tolerant mode: the default group is the replica's own)

    # --- the extension methods: what an algorithm built on this round (sparseloco) overrides ---------------------
    def new_exchange(self, fragment: list[torch.Tensor], start: torch.Tensor) -> FragmentExchange:
        """The exchange of one fragment's outer gradient (``fragment``: its parameters, this rank's local tensors;
        ``start``: its flat fp32 start weights). Called once per fragment when the inner phase begins, in fragment
        order on every rank. An override returns a :class:`FragmentExchange` over ``self.group`` with
        ``start.numel()`` elements (its codec and error feedback are the override's: sparseloco's top-k); this
        one uses the config's ``compression`` and ``error_feedback``."""
        codec = get_codec(self.config.compression) if self.config.compression else None
        return FragmentExchange(start.numel(), codec, self.config.error_feedback, self.group, self.nranks, start.device)

    def merge_in_flight(self, fragment: int) -> bool:
        """A merge of the fragment in one go, where the algorithm can do it cheaper than landing the dense average,
        stepping :attr:`outer` on it and writing ``starts[fragment]`` into the weights: wait for the exchange in
        flight (on this thread), take the outer step on ``starts[fragment]`` and set the fragment's weights to it.
        Asked only for such a plain merge (no overlap kept, no mixing, no eager); False: nothing done, the merge
        takes its steps. Default: False."""
        return False

    def new_outer(self, starts: list[torch.Tensor]) -> torch.optim.Optimizer:
        """The outer optimizer over every fragment's start weights (its gradient: the averaged outer gradient),
        called once after :meth:`new_exchange`. An override returns any ``torch.optim.Optimizer`` over ``starts``
        (sparseloco's: plain SGD); its state is checkpointed with the round's. This one: SGD with the config's
        ``outer_lr``, ``outer_momentum`` and ``nesterov``."""
        return torch.optim.SGD(starts, lr=self.config.outer_lr, momentum=self.config.outer_momentum,
                               nesterov=self.config.nesterov and self.config.outer_momentum > 0)

    # --- events --------------------------------------------------------------------------------------
    def init_forward_pre_hook(self, bagua_module: torch.nn.Module) -> Callable[[Any], None]:
        def hook(inputs: Any) -> None:
            self._run_events(self.inner_step() - 1)  # a step whose optimizer did not run (GradScaler)
            if self.timed is not None:
                self.timed.on_forward(inputs, torch.is_grad_enabled())

        return hook

    def init_step_end_hook(self, bagua_module: torch.nn.Module) -> Callable[[], None]:
        def hook() -> None:  # every optimizer has stepped
            self._run_events(self.inner_step())

        return hook

    def _run_events(self, through: int) -> None:
        if self.timed is not None:
            for step in range(self.done_through + 1, through + 1):
                self._end_of_timed_step(step)
                self.done_through = step
            return
        overlap = self.schedule.overlap
        for step in range(self.done_through + 1, through + 1):
            for fragment in self.schedule.merges_at(step) if overlap else ():
                self._merge(fragment)
            for fragment in self.schedule.syncs_at(step):
                self._send(fragment, step + overlap)
                if not overlap:
                    self._merge(fragment)
            self.done_through = step

    def _end_of_timed_step(self, step: int) -> None:
        """Rounds bounded in time (:mod:`.timed`). With the courier, each replica on its own: merge the round in
        flight at the first step end, ``overlap_steps`` or more after its send, at which it has landed (on every
        rank of a sharded replica), then end the round when this replica's clock says so and nothing is in flight,
        and send it on the courier (the weights by samples are agreed there). The training thread never waits for
        another replica, so no collective of the user's loop between steps can deadlock with a round. Without the
        courier (fault-tolerant mode) each replica ends its round at the step chosen before it ran, for which it
        joined the quorum (:meth:`round_syncs`), so the replicas meet there, and merges ``overlap_steps`` steps
        later, waiting there."""
        device = self.starts[0].device
        if self.courier is None:  # fault-tolerant mode
            if self.pending and step >= self.pending[0]:
                self._merge(0)
            self.timed.after_step()  # (counts the step; the round's end was chosen before it)
            if self.timed.end_at == step and not self.pending:
                self._send_round(step + self.schedule.overlap, done=False)
                if not self.schedule.overlap:
                    self._merge(0)
            return
        if self.pending:  # merged once landed, on every rank of the replica
            due = step >= self.pending[0]
            if not agree_to_end(not (due and self._has_landed(0)), None, self.shard_peers, device):
                self._merge(0)
        wants = self.timed.after_step() and not self.pending
        if not agree_to_end(wants, None, self.shard_peers, device):
            return
        self._send_round(step + self.schedule.overlap, done=False)

    def _send_round(self, merge_step: int, done: bool) -> None:
        """Send the timed round that ends now: this replica's samples in it (summed over a sharded replica's ranks
        here), the weights agreed with the other replicas and ``done`` where the exchange runs."""
        device = self.starts[0].device
        samples = replica_samples(self.timed.contribution(), self.shard_peers, device)
        counted = self.courier is not None  # (the courier's job counts nothing: its allgather is counted now)
        if counted:
            record_weights(self.nranks)
        self._send(0, merge_step, functools.partial(replica_weights, samples, done, self.group, self.nranks, device,
                                                    counted=counted))
        self.timed.restart()

    def _has_landed(self, fragment: int) -> bool:
        future = self.futures.get(fragment)
        return fragment in self.landed or future is None or future.done()

    def _join(self) -> None:
        """Rounds bounded in time, at shutdown: this replica trains no more. It sends what it trained since its last
        round (its samples weigh it) and then rounds of nothing, marked done, merging each, until a round in which
        every replica was done: a replica whose loop ended sooner takes part in the rounds the others still run
        (torch's ``Join`` for inputs of unequal length) instead of leaving them a dead peer."""
        if self.pending:
            self._merge(0)
        while True:
            self._send_round(self.done_through, done=True)
            self._merge(0)
            if self.all_done:
                return

    def _send(self, fragment: int, merge_step: int,
              weigh: Callable[[], tuple[list[float], float, bool]] | None = None) -> None:
        """Start the fragment's exchange (``weigh``: the timed round's weights, agreed where the exchange runs). Its
        bytes are counted here, in the step that sends it, also when it runs on the courier (which counts nothing)."""
        start, params = self.starts[fragment], self.fragments[fragment]
        keeps_progress = self.config.keeps_progress and (self.schedule.overlap > 0 or self.courier is not None)
        exchange, eager = self.exchanges[fragment], self.config.eager
        # on the training thread, unweighted and with the delta needed nowhere else: the codec takes the difference
        # in its encoding pass where it can (sparseloco's), instead of a delta written here and read there
        in_codec = (self.courier is None and weigh is None and not keeps_progress and not eager
                    and exchange.takes_difference)
        if keeps_progress:  # what was sent is the anchor of what is trained on meanwhile
            sent = gather_flat(params, torch.empty_like(start))
            delta = torch.sub(start, sent)
        elif not in_codec:
            delta = subtract_flat(start, params, self.deltas[fragment])
        counted = self.courier is not None
        if counted:
            exchange.record()

        def launch() -> tuple[list[float], float, bool] | None:
            if in_codec:
                exchange.start_difference(start, params, self.deltas[fragment], counted=counted)
                return None
            weighed = weigh() if weigh is not None else None
            weights, own = (weighed[0], weighed[1]) if weighed is not None else (None, 1.0)
            exchange.start(delta, weights, own, keep_contribution=eager, counted=counted)
            return weighed

        if self.courier is not None:
            def job() -> tuple[torch.Tensor, torch.Tensor | None, tuple[list[float], float, bool] | None]:
                with torch.cuda.device(start.device) if start.is_cuda else contextlib.nullcontext():
                    weighed = launch()  # (a new thread's current CUDA device is the first)
                    return exchange.wait(), exchange.contribution, weighed

            self.futures[fragment] = self.courier.submit(job)
        else:  # on the training thread; waited for at the merge
            weighed = launch()
            if weighed is not None:
                self.last_weights, self.all_done = weighed[0], weighed[2]
        if eager:  # continue from the proxy outer step (.eager)
            sent = proxy_step(self.outer, start, proxy_gradient(delta, self.others.get(fragment), self.nranks))
            scatter_flat(sent, params)
        if keeps_progress:
            self.anchors[fragment] = sent
        self.pending[fragment] = merge_step

    def _land(self, fragment: int) -> torch.Tensor:
        """The fragment's averaged outer gradient, waited for if it has not landed yet."""
        if fragment not in self.landed:
            future = self.futures.pop(fragment, None)
            if future is not None:
                average, contribution, weighed = future.result()
                if weighed is not None:
                    self.last_weights, self.all_done = weighed[0], weighed[2]
            else:
                exchange = self.exchanges[fragment]
                average, contribution = exchange.wait(), exchange.contribution
            self.landed[fragment] = average
            if self.config.eager:
                self.contributions[fragment] = contribution
        return self.landed[fragment]

    def _merge(self, fragment: int) -> None:
        start, params = self.starts[fragment], self.fragments[fragment]
        mixes = self.schedule.overlap and self.config.mixing > 0
        plain = (fragment not in self.landed and fragment not in self.futures and fragment not in self.anchors
                 and not self.config.eager and not mixes)  # in flight on this thread, and x = theta' after
        if not (plain and self.merge_in_flight(fragment)):
            average = self._land(fragment)
            del self.landed[fragment]
            if self.config.eager:
                self.others[fragment] = others_of(average, self.contributions.pop(fragment), self.nranks)
            start.grad = average
            self.outer.step()  # only the fragment with a gradient moves
            start.grad = None
            anchor = self.anchors.pop(fragment, None)
            if anchor is not None:  # keep what was trained since the send: x = theta' + (x_now - anchor)
                local = gather_flat(params, torch.empty_like(start))
                scatter_flat(local.sub_(anchor).add_(start), params)
            elif mixes:
                local = gather_flat(params, torch.empty_like(start))
                scatter_flat(local.mul_(self.config.mixing).add_(start, alpha=1 - self.config.mixing), params)
            else:
                scatter_flat(start, params)
        del self.pending[fragment]
        self.merged = RoundCount(self.merged.rounds + 1, self.merged.dense_bytes + start.numel() * 4)

    def round_syncs(self, bagua_module: torch.nn.Module) -> bool:
        """Fault-tolerant mode (``commit="at_round"``): whether the coming inner step (the step counter moves at its
        forward, after this is asked) sends a fragment's outer gradient, so that the exchange runs between the
        replicas of a quorum joined just before it. Warmup steps: every step. Rounds bounded in time: the step that is
        to end the round, chosen now (:meth:`RoundProgress.predicts_end <.timed.RoundProgress.predicts_end>`, agreed
        by the replica's ranks) once the previous round has merged; the choice is kept with the round's state."""
        if self.warming_up(bagua_module):
            return True
        step = self.inner_step() + 1
        if self.timed is not None:
            ends = not self.pending and self.timed.predicts_end()
            ends = agree_to_end(ends, None, self.replica_peers, self.starts[0].device)
            self.timed.end_at = step if ends else None
            return ends
        return bool(self.schedule.syncs_at(step))

    def round_ends(self, bagua_module: torch.nn.Module) -> bool:
        """Fault-tolerant mode (``commit="at_round"``): a round's transaction ends at each step during which a
        fragment's outer result was merged (every H steps, ``overlap_steps`` after the send; streaming: each
        fragment's merge), so the copy the next round starts from holds no exchange of its own in flight (a
        streamed fragment's may be: its ``sent`` is copied and sent again); rounds bounded in time likewise, at the
        merge of the round that ended at the step chosen for it (:meth:`round_syncs`), so a fast replica's round
        holds more inner steps than a slow one's. Warmup steps are rounds of one step, with a quorum each."""
        if self.warming_up(bagua_module):
            return True
        asked, self.merges_asked = self.merges_asked, self.merged.rounds
        return self.merged.rounds != asked

    def rounds_completed(self) -> RoundCount:
        """A round is one fragment's outer step (every fragment's at once without streaming); its full-precision
        bytes are the fragment's fp32 outer gradient, what an uncompressed allreduce of it hands over."""
        return self.merged

    def shutdown(self, bagua_module: torch.nn.Module) -> None:
        if self.timed is not None and self.courier is not None and self.starts and first_failure() is None:
            self._join()
        for fragment in list(self.pending):
            if fragment not in self.landed:
                if self.fault_tolerant:  # the quorum's group is replaced; the carried state resends it
                    self.exchanges[fragment].abandon()
                else:
                    self._land(fragment)  # nothing left in flight on the group
        if self.courier is not None:
            self.courier.close()

    # --- checkpoints (bagua_features.checkpoints.checkpoint) ---------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        # fault-tolerant mode takes it at every round's start: the exchanges in flight stay in flight (state.py)
        return state_of(self, wait=not self.fault_tolerant)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        restore(self, state)


class DiLoCoAlgorithm(Algorithm):
    """DiLoCo: H local steps, then an outer Nesterov step on the averaged pseudo-gradient; streaming mode."""

    name = "diloco"
    Config = DiLoCoConfig
    Impl = DiLoCoAlgorithmImpl
    capabilities = Capabilities(communicates="weights", weights_differ_across_ranks=True, relative_bytes=None,
                                supports_sharding=True,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "algorithm_state", "step"), commit="at_round",
                                    rederives=("averaging denominator",),
                                    per_replica_state=("residuals", "round_samples")))
    """Pseudo-gradients of the weights every ``inner_steps`` steps: ~1/H of allreduce's bytes."""
