"""Rounds bounded in time (``round_seconds``): no replica waits for a slower one, each merge weighted by samples.

A replica (a rank; on a model sharded with FSDP2 the node's ranks together) ends its round after the inner step
at which ``elapsed + elapsed / steps / 2 >= round_seconds`` and its previous round has been merged: ``elapsed``
is :data:`clock` now minus its value at the round's first training forward, ``steps`` the inner steps taken in
the round (so a round ends at the step whose end is nearest ``round_seconds``, and at least one step is taken).
The ranks that must agree do so over a one-element MAX (the round ends when any of them would end it): the ranks
of a sharded replica over their node's group. A fast replica thus takes more inner steps than a slow one;
it sends its round without waiting and merges it once the others' parts have landed
(``DiLoCoAlgorithmImpl._end_of_timed_step``).

In fault-tolerant mode the replicas meet only at a round's end: each joins the quorum before the inner step that
will end its round, so the step is chosen before it runs (:meth:`RoundProgress.predicts_end`): the round ends
with the coming step when ``after + after / (steps + 1) / 2 >= round_seconds``, ``after`` being ``elapsed`` plus
the round's mean step so far (the previous round's for its first step; 0 in a replica's first round). The
replica's ranks agree on it by the same MAX (its node's group, or its own default group when its ranks are
replicated), and the decision (:attr:`RoundProgress.end_at`) travels with the round's state, so a joiner healed
at that step ends the round with its healer.

The merge weights each replica's contribution by ``n_r``, the samples it trained on in the round
(:func:`~bagua_core.api.samples_in` of every training forward's inputs, summed over a sharded replica's ranks by
:func:`replica_samples`; 0 for a replica that joined in the middle of the round in fault-tolerant mode): one
allgather of ``(n_r, done_r)`` (float64, :func:`replica_weights`) gives every replica ``w_r = R * n_r / N``
(``N = sum n_r``; every ``w_r`` = 1 when ``N`` is 0) and whether every replica is done (the join at shutdown).

:data:`clock` is what the rounds read; a test replaces it to give every rank a fixed cost per step.

Example::

    >>> progress = RoundProgress(round_seconds=20.0)
    >>> progress.on_forward((x, y)); ...; progress.after_step()     # True: end the round after this step
    >>> samples = replica_samples(progress.contribution(), shard_peers, device)
    >>> weights, own, all_done = replica_weights(samples, False, group, nranks, device)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from bagua_core.api import all_gather_single, record_payload, samples_in

__all__ = ["clock", "RoundProgress", "agree_to_end", "record_weights", "replica_samples", "replica_weights"]

clock: Callable[[], float] = time.monotonic
"""The seconds the rounds read (module doc); a test replaces it (``timed.clock = fake``)."""


class RoundProgress:
    """One replica's progress in the round in flight: when it began, its inner steps and its samples."""

    __slots__ = ("round_seconds", "began", "steps", "samples", "counting", "rounds", "end_at", "last_mean")

    def __init__(self, round_seconds: float) -> None:
        self.round_seconds = round_seconds
        self.began: float | None = None
        """:data:`clock` at the round's first training forward (None before it)."""
        self.steps = 0
        self.samples = 0
        self.counting = True
        """False for a replica healed in the middle of a round (fault-tolerant mode): its weight there is 0."""
        self.rounds = 0
        """Rounds merged so far (the same on every replica)."""
        self.end_at: int | None = None
        """Fault-tolerant mode: the inner step that ends the round, chosen before it ran (:meth:`predicts_end`)."""
        self.last_mean = 0.0
        """The mean seconds of an inner step in the previous round (0 before one ended)."""

    def on_forward(self, inputs: Any, training: bool) -> None:
        """A training forward of the round (``training``: one backward may follow, so its samples count)."""
        if self.began is None:
            self.began = clock()
        if training and self.counting:
            self.samples += samples_in(inputs)

    def after_step(self) -> bool:
        """An inner step ended: whether this replica's round ends with it (module doc)."""
        self.steps += 1
        if self.began is None:  # a step without a training forward (it can only follow one): a zero-length round
            self.began = clock()
        elapsed = clock() - self.began
        return elapsed + 0.5 * elapsed / self.steps >= self.round_seconds

    def predicts_end(self) -> bool:
        """Before an inner step, in fault-tolerant mode: whether the round is to end with it (module doc): its end
        predicted from the round's mean step so far, or the previous round's before the round's first step."""
        elapsed = 0.0 if self.began is None else clock() - self.began
        mean = elapsed / self.steps if self.steps else self.last_mean
        after = elapsed + mean
        return after + 0.5 * after / (self.steps + 1) >= self.round_seconds

    def contribution(self) -> int:
        """``n_r``: the samples this rank trained on in the round (0 where it joined in the middle of it)."""
        return self.samples if self.counting else 0

    def restart(self) -> None:
        """The round was sent: the next one begins at the next training forward."""
        if self.began is not None and self.steps:
            self.last_mean = (clock() - self.began) / self.steps
        self.began, self.steps, self.samples, self.counting, self.end_at = None, 0, 0, True, None
        self.rounds += 1

    # --- state (diloco's checkpoints and fault-tolerant mode's copies) ---------------------------------------
    def shared_state(self) -> dict[str, Any]:
        """What every replica of the round has alike: a joiner takes it from the replica it heals from."""
        elapsed = None if self.began is None else clock() - self.began
        return {"steps": self.steps, "elapsed": elapsed, "rounds": self.rounds, "end_at": self.end_at}

    def own_state(self) -> dict[str, Any]:
        """What is this replica's own (its samples): a joiner does not take it."""
        return {"samples": self.samples, "counting": self.counting}

    def load(self, shared: dict[str, Any], own: dict[str, Any] | None) -> None:
        """Restore :meth:`shared_state` and :meth:`own_state`; ``own`` None: a joiner healed from a live replica,
        whose weight in the round is 0 when the round had begun (its weights repeat its healer's progress)."""
        self.steps, self.rounds = int(shared["steps"]), int(shared["rounds"])
        end_at = shared.get("end_at")
        self.end_at = None if end_at is None else int(end_at)
        elapsed = shared["elapsed"]
        self.began = None if elapsed is None else clock() - float(elapsed)
        if own is None:
            self.samples, self.counting = 0, self.steps == 0 and elapsed is None
        else:
            self.samples, self.counting = int(own["samples"]), bool(own["counting"])


def agree_to_end(wants: bool, between: Any, shard_peers: Any, device: torch.device) -> bool:
    """Whether the round ends, agreed: a MAX over ``between`` (the quorum's group in fault-tolerant mode, where the
    replicas step together; None otherwise), then over ``shard_peers`` (the node's ranks of a sharded replica;
    None for a replica of one rank)."""
    if between is None and shard_peers is None:
        return wants
    flag = torch.tensor([1.0 if wants else 0.0], device=device)
    for group in (between, shard_peers):
        if group is not None:
            record_payload("allreduce", flag)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item() > 0)


def replica_samples(samples: int, shard_peers: Any, device: torch.device) -> float:
    """``n_r``: this rank's ``samples`` summed over ``shard_peers`` (a sharded replica's ranks; None: one rank)."""
    if shard_peers is None:
        return float(samples)
    mine = torch.tensor([float(samples)], dtype=torch.float64, device=device)
    record_payload("allreduce", mine)
    dist.all_reduce(mine, group=shard_peers)
    return float(mine)


def record_weights(nranks: int) -> None:
    """Count :func:`replica_weights`' allgather (its 16 bytes) now: a call on the courier's thread is counted by the
    training thread in the step that sends the round, and takes ``counted=True``."""
    if nranks > 1:
        record_payload("allgather", 16)  # (n_r, done_r), float64


def replica_weights(samples: float, done: bool, group: Any, nranks: int, device: torch.device,
                    counted: bool = False) -> tuple[list[float], float, bool]:
    """Every replica's ``w_r = R * n_r / N`` in the group's rank order (module doc), this replica's, and whether
    every replica is done (:meth:`~bagua_algorithms.diloco.DiLoCoAlgorithmImpl.shutdown`'s join), from this
    replica's ``n_r`` (``samples``) and ``done``: one allgather of ``(n_r, done_r)`` over ``group`` (float64; counted
    unless ``counted``, :func:`record_weights`).
    This replica's weight is computed from its own ``n_r`` by the same expression: the same float as its entry
    in the list."""
    mine = torch.tensor([float(samples), 1.0 if done else 0.0], dtype=torch.float64, device=device)
    everyone = torch.zeros(2 * nranks, dtype=torch.float64, device=device)
    if nranks > 1:
        if not counted:
            record_weights(nranks)
        all_gather_single(everyone, mine, group=group)
    else:
        everyone.copy_(mine)
    counts, flags = everyone[0::2], everyone[1::2]
    all_done = bool((flags > 0).all())
    total = float(counts.sum())
    if not total > 0 or not torch.isfinite(counts).all():  # (a failed collective's buffer: the step is undone)
        return [1.0] * nranks, 1.0, all_done
    return [nranks * n / total for n in counts.tolist()], nranks * float(samples) / total, all_done
