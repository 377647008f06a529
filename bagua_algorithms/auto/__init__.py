"""``algorithm="auto"``: a registered algorithm (entry point ``auto``, like every other) that picks,
while the first steps train, the fastest installed algorithm that keeps the optimizer's semantics.

Candidates: every installed algorithm whose ``capabilities`` say ``keeps_optimizer_semantics`` and that
needs nothing special (no optimizer of its own, no stepping inside backward, no background work, equal
weights on every rank: :func:`.config.auto_candidate`), with its default options, in
name order; ``candidates=[...]`` narrows the set. A third-party algorithm declaring these capabilities
takes part as soon as it is installed. On a single node (every rank on one host:
:func:`bagua_core.selection.single_node.on_one_node`) a candidate whose options default to ``hierarchical=True``
is tried with ``hierarchical=False``: hierarchically it would compress nothing there (only between
nodes), so the variant that compresses on the network found is the one worth timing.

Rule (:mod:`bagua_algorithms.auto.chooser`): the first candidate trains ``warmup_steps`` steps; then each
candidate trains ``trial_steps`` steps in turn (the first step of a trial, which rebuilds the buckets,
is not timed); the step time of a candidate is the median of its timed steps, the MAX over the ranks
(the slowest rank sets the pace). Rank 0 picks the smallest and broadcasts its index; every rank
switches to it for the rest of training. The choice, the step times, the link figures (latency and
bandwidth of a few timed allreduces over the group, which spans the nodes), the model's bytes and
each candidate's declared ``relative_bytes`` are logged on logger ``bagua.auto`` and kept in
``model.bagua_auto_result``; ``WrappedModule(model).impl`` is then the chosen algorithm's impl.

Communicated: during the trials, what each candidate communicates; at the decision, 6 small and 3
model-sized allreduces (the link figures, :mod:`bagua_algorithms.auto.link`), one float64 allreduce (MAX) per candidate and
one int64 broadcast, on the group's communication thread, at the same step on every rank (the schedule is a
function of the step count, and the candidate list is compared across ranks by ``with_bagua``).

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and the candidate plan),
:mod:`.chooser` (the impl: trials, decision, hand-over), :mod:`.link` (the link figures).

Example::

    >>> model = model.with_bagua([optimizer], "auto")
    >>> # ... after warmup_steps + candidates * trial_steps steps:
    >>> model.bagua_auto_result["algorithm"]
    'bytegrad'

Fault-tolerant mode (the group's ``membership`` says replicas come and go; the candidates are chosen when
the algorithm is reified, :meth:`AutoAlgorithm.plan`): the candidates are those that declare fault tolerance
(``candidates=[...]`` naming another is refused), each replica is a node (no single-node variants), and the
trials run on the step's quorum: a change of membership during them (or a failed step) restarts them on the
new quorum, so every time compared was taken on the same replicas. The choice is final: this impl keeps
running the module after it, and its ``state_dict`` carries the choice, so a replica that joins later (or
the survivors of a later failure, re-reified on their new quorum) run the chosen candidate from their first
step without timing anything. Its fault tolerance is its candidates' (``plan(membership).fault_tolerance``):
what any of them heals plus the choice, committed before the optimizer step when every candidate commits
there.
"""
from __future__ import annotations

from bagua_algorithms.auto.algorithm import AutoAlgorithm, Plan
from bagua_algorithms.auto.chooser import AutoImpl
from bagua_algorithms.auto.config import AUTO, AutoConfig, auto_candidate, candidate_names
from bagua_core.api import Algorithm, hookimpl

__all__ = ["AUTO", "AutoAlgorithm", "AutoConfig", "AutoImpl", "Plan", "auto_candidate", "candidate_names"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [AutoAlgorithm]
