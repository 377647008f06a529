"""What a diloco checkpoint holds on each rank, and how it is restored (``bagua_features.checkpoints.checkpoint`` calls
``state_dict``/``load_state_dict`` of the impl, which use these).

Saved: the outer state (every fragment's start weights and the outer optimizer), the residuals of error
feedback (``residuals``: this rank's own, which a joiner in fault-tolerant mode does not take from its peer),
the outer gradients received or in flight (waited for here, merged at their step after the
restart; in fault-tolerant mode not waited for: what this rank sent is kept and sent again on restore),
the schedule position (train step, last inner step whose events ran), this rank's local
parameters and its inner optimizers (the dense checkpoint file holds rank 0's only). Restored, a run
continues exactly as if it had not stopped. An overlapped round adds the weights each pending fragment
continued from (``anchors``), and eager updates what this replica's part of a landed exchange decoded to
(``contributions``) and what the others sent in the last merged round (``others``). Rounds bounded in time add
the round's progress (``round``: its steps, the training seconds since it began, the rounds merged) and this
replica's samples in it (``round_samples``, its own: a joiner does not take them); a resumed round goes on from
the seconds it had.

Example::

    >>> state = state_of(WrappedModule(model).impl)     # on every rank
    >>> restore(WrappedModule(resumed).impl, state)
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import torch

from bagua_algorithms.diloco.exchange import FragmentExchange
from bagua_algorithms.diloco.timed import RoundProgress
from bagua_core.api import WrappedModule, load_optimizer_state, tensors

__all__ = ["DiLoCoRankState", "state_of", "restore"]

logger = logging.getLogger("bagua.diloco")


class DiLoCoRankState(Protocol):
    """What a checkpoint reads and writes of the impl (``DiLoCoAlgorithmImpl`` has it). The impl uses
    this module, so this module describes the impl instead of importing it."""

    _module: Any  # the wrapped module, None before the first wrap
    step_offset: int
    done_through: int
    starts: list[torch.Tensor]
    outer: torch.optim.Optimizer | None
    exchanges: list[FragmentExchange]
    pending: dict[int, int]
    landed: dict[int, torch.Tensor]
    anchors: dict[int, torch.Tensor]
    contributions: dict[int, torch.Tensor]
    others: dict[int, torch.Tensor]
    timed: RoundProgress | None
    futures: dict[int, Any]

    def train_step(self) -> int: ...

    def _land(self, fragment: int) -> torch.Tensor: ...


def state_of(impl: DiLoCoRankState, wait: bool = True) -> dict[str, Any]:
    """The rank's state ({} during warmup: the model and optimizer are all there is).

    ``wait=False`` (fault-tolerant mode's copy at every round's start, and what a joiner heals): the exchanges in flight
    are not waited for (streaming keeps its overlap); what this rank sent in each is kept instead (``sent``)
    and :func:`restore` sends it again on the impl's group, and the tensors are not cloned (the caller's
    copy clones them)."""
    if not impl.starts or impl._module is None:  # (no start weights until the inner phase begins)
        return {}
    if not wait and impl.futures:
        raise RuntimeError("an exchange on the courier thread cannot be copied in flight: fault-tolerant mode runs "
                           "them on the training thread")
    sent, in_flight = [], {}
    for fragment in sorted(impl.pending):
        if fragment in impl.landed:
            continue
        if wait:
            impl._land(fragment)
        else:
            exchange = impl.exchanges[fragment]
            sent.append([fragment, exchange.sent])
            if exchange.contribution is not None:
                in_flight[fragment] = exchange.contribution
    contributions = {**impl.contributions, **in_flight}
    module = WrappedModule(impl._module)
    clone = (lambda t: t.clone()) if wait else (lambda t: t)  # noqa: E731
    state = {"train_step": impl.train_step(), "done_through": impl.done_through,
             "starts": [clone(s) for s in impl.starts], "outer": impl.outer.state_dict(),
             "residuals": [e.residual for e in impl.exchanges],
             "pending": [[f, step] for f, step in sorted(impl.pending.items())],
             "landed": [[f, clone(t)] for f, t in sorted(impl.landed.items())],
             "local": [clone(tensors.local_shard(p).detach()) for _, p in module.named_parameters()],
             "inner_optimizers": [optimizer.state_dict() for optimizer in module.optimizers]}
    for key, by_fragment in (("anchors", impl.anchors), ("contributions", contributions), ("others", impl.others)):
        if by_fragment:  # an overlapped round's (anchors), eager updates' (contributions, others)
            state[key] = [[f, clone(t)] for f, t in sorted(by_fragment.items())]
    if sent:
        state["sent"] = sent
    if impl.timed is not None:
        state["round"], state["round_samples"] = impl.timed.shared_state(), impl.timed.own_state()
    return state


def restore(impl: DiLoCoRankState, state: dict[str, Any]) -> None:
    """Restore :func:`state_of`'s result into a freshly wrapped module's impl."""
    if not state:
        return
    for fragment in list(impl.futures):  # an exchange of this impl's own on the courier: it completes on the group
        impl._land(fragment)
    module = WrappedModule(impl._module)
    impl.step_offset = int(state["train_step"]) - module.train_step_counter
    if not impl.starts:  # the buckets are the core's warmup's: the state's step is past it
        module.reset()  # into the inner phase
    with torch.no_grad():
        for param, saved in zip((tensors.local_shard(p) for _, p in module.named_parameters()), state["local"]):
            param.copy_(saved)
        for start, saved in zip(impl.starts, state["starts"]):
            start.copy_(saved)
    for optimizer, saved in zip(module.optimizers, state["inner_optimizers"]):
        load_optimizer_state(optimizer, saved)  # (a heal's copy holds local shards)
    impl.outer.load_state_dict(state["outer"])
    # (a joiner's heal leaves the residuals out: they are what the peer has not sent, its own to send)
    for exchange, residual in zip(impl.exchanges, state.get("residuals", ())):
        if residual is not None:
            exchange.residual = residual.clone()
    impl.done_through = int(state["done_through"])
    if impl.timed is not None and "round" in state:  # (a heal leaves round_samples out: the joiner's own)
        impl.timed.load(state["round"], state.get("round_samples"))
    impl.pending = {int(f): int(step) for f, step in state["pending"]}
    impl.landed = {int(f): t.clone() for f, t in state["landed"]}
    impl.anchors, impl.others = ({int(f): t.clone() for f, t in state.get(key, [])} for key in ("anchors", "others"))
    contributions = {int(f): t.clone() for f, t in state.get("contributions", [])}
    impl.contributions = {f: t for f, t in contributions.items() if f in impl.landed}
    resent = {int(f): payload for f, payload in state.get("sent", [])}
    for fragment, exchange in enumerate(impl.exchanges):
        if fragment in resent:  # the exchange in flight when the state was taken, on this impl's group
            logger.warning("diloco: fragment %d's exchange, in flight when the step's state was taken, is sent again "
                           "(a step failed or the quorum changed)", fragment)
            exchange.resend(resent[fragment])
            exchange.contribution = contributions.get(fragment)
        elif exchange.in_flight:  # launched after the state was taken (by a step that is being undone)
            exchange.abandon()
