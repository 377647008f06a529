"""``algorithm="auto"``: a registered algorithm (entry point ``auto``, like every other) that picks,
while the first steps train, the fastest installed algorithm that keeps the optimizer's semantics.

Candidates: every installed algorithm whose ``capabilities`` say ``keeps_optimizer_semantics`` and that
needs nothing special (no optimizer of its own, no stepping inside backward, no background work, equal
weights on every rank: :func:`bagua_core.lifecycle.capabilities.auto_candidate`), with its default options, in
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
``model.bagua_auto_result``; ``model.bagua_algorithm`` is then the chosen algorithm's impl.

Communicated: during the trials, what each candidate communicates; at the decision, 6 small and 3
model-sized allreduces (the link figures, :mod:`bagua_algorithms.auto.link`), one float64 allreduce (MAX) per candidate and
one int64 broadcast, on the group's communication thread, at the same step on every rank (the schedule is a
function of the step count, and the candidate list is compared across ranks by ``with_bagua``).

Example::

    >>> model = model.with_bagua([optimizer], "auto")
    >>> # ... after warmup_steps + candidates * trial_steps steps:
    >>> model.bagua_auto_result["algorithm"]
    'bytegrad'

Fault-tolerant mode (``bagua_core.fault_tolerance``): the candidates are those that declare fault tolerance
(``candidates=[...]`` naming another is refused), each replica is a node (no single-node variants), and the
trials run on the step's quorum: a change of membership during them (or a failed step) restarts them on the
new quorum, so every time compared was taken on the same replicas. The choice is final: this impl keeps
running the module after it, and its ``state_dict`` carries the choice, so a replica that joins later (or
the survivors of a later failure, re-reified on their new quorum) run the chosen candidate from their first
step without timing anything. Its fault tolerance is its candidates' (``AutoAlgorithm.fault_tolerance``):
what any of them heals plus the choice, committed before the optimizer step when every candidate commits
there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from pydantic import Field, field_validator

from bagua_algorithms.auto.chooser import AutoImpl
from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig
from bagua_core.lifecycle.capabilities import Capabilities, FaultTolerance, auto_candidate
from bagua_core.runtime.exceptions import BaguaConfigError
from bagua_core.plugins import algorithm_registry, hookimpl
from bagua_core.selection.single_node import defaults_to_hierarchical, on_one_node, without_hierarchy

__all__ = ["AUTO", "AutoConfig", "AutoAlgorithm", "candidate_names"]

AUTO = "auto"
"""The name this algorithm is registered by."""

_HEALS = ("weights", "optimizer", "algorithm_state", "step")
_TRIALS_AGAIN = "the trials (a new quorum during them restarts them on it)"


def candidate_names() -> list[str]:
    """The installed algorithms ``auto`` may choose, in name order (never ``auto`` itself)."""
    return [name for name in algorithm_registry.names()
            if algorithm_registry.get(name) is not AutoAlgorithm and auto_candidate(algorithm_registry.get(name))]


class AutoConfig(AlgorithmConfig):
    name: Literal["auto"] = "auto"
    candidates: tuple[str, ...] | None = None
    """Names to choose among (each must be an installed auto candidate); None: every installed one."""
    warmup_steps: int = Field(2, ge=0)
    """Steps with the first candidate before the first trial."""
    trial_steps: int = Field(5, ge=2)
    """Steps per candidate; the first of them (it rebuilds the buckets) is not timed."""

    @field_validator("candidates")
    @classmethod
    def _known(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        allowed = candidate_names()
        wrong = [name for name in value if name not in allowed]
        if wrong or not value:
            raise ValueError(f"candidates must be installed algorithms that keep the optimizer's semantics "
                             f"({', '.join(allowed) or 'none installed'}), got {list(value)}")
        return tuple(dict.fromkeys(value))


class AutoAlgorithm(Algorithm):
    """Chooses, while training, the fastest candidate algorithm (see the module's docstring)."""

    name = AUTO
    Config = AutoConfig
    capabilities = Capabilities(
        communicates="gradients", keeps_optimizer_semantics=True, relative_bytes=None,
        fault_tolerance=FaultTolerance(heals=_HEALS, commit="after_step", rederives=(_TRIALS_AGAIN,)))
    """During the trials the module's ``bagua_capabilities`` are the current candidate's; in fault-tolerant mode
    with the ``fault_tolerance`` of this instance's candidates (:attr:`fault_tolerance`), whichever runs."""

    def __init__(self, candidates: Sequence[str] | None = None, warmup_steps: int = 2, trial_steps: int = 5,
                 optimizers: Sequence[torch.optim.Optimizer] = ()) -> None:
        super().__init__(candidates=None if candidates is None else tuple(candidates), warmup_steps=warmup_steps,
                         trial_steps=trial_steps)
        from bagua_core.fault_tolerance.current import current_runtime

        fault_tolerant = current_runtime() is not None
        names = list(self.config.candidates or candidate_names())
        if fault_tolerant:  # only candidates that survive a change of membership (module doc)
            refused = [n for n in names if algorithm_registry.get(n).capabilities.fault_tolerance is None]
            if self.config.candidates and refused:
                raise BaguaConfigError(f"algorithm 'auto': candidate(s) {refused} cannot run in fault-tolerant mode "
                                       f"(they declare no Capabilities.fault_tolerance); leave them out of "
                                       f"candidates or run without --fault-tolerant")
            names = [n for n in names if n not in refused]
        if not names:
            raise BaguaConfigError("algorithm 'auto': no installed algorithm declares keeps_optimizer_semantics"
                                   f"{' and fault tolerance' if fault_tolerant else ''} (bagua plugins lists the "
                                   "capabilities)")
        flat = on_one_node() and not fault_tolerant  # in fault-tolerant mode every replica is a node
        self.declarations = [_build(name, optimizers, flat) for name in names]
        self.overrides = {d.name: {"hierarchical": False} for d in self.declarations
                          if flat and defaults_to_hierarchical(type(d.config))}
        """The options each candidate runs with that differ from its defaults (the single-node variants)."""
        self.fault_tolerance = _fault_tolerance(self.declarations) if fault_tolerant else None
        """Fault-tolerant mode: how this instance survives a change of membership (its candidates' policies
        joined, module doc); None otherwise."""

    @classmethod
    def from_config(cls, config: AlgorithmConfig, optimizers: Sequence[torch.optim.Optimizer] = ()) -> AutoAlgorithm:
        return cls(**config.model_dump(exclude={"name"}), optimizers=optimizers)

    def canonical_options(self) -> dict[str, Any]:
        """The options and every candidate with its options (ranks with other plugins installed differ)."""
        return {**super().canonical_options(),
                "candidates": {d.name: d.canonical_options() for d in self.declarations}}

    def reify(self, process_group: Any) -> AutoImpl:
        return AutoImpl(process_group, self)


def _fault_tolerance(declarations: Sequence[Algorithm]) -> FaultTolerance:
    """What any candidate heals, plus the choice (``algorithm_state``); the commit before the optimizer step
    only when every candidate commits there (a trial switches candidates between steps)."""
    policies = [type(d).capabilities.fault_tolerance for d in declarations]
    heals = tuple(h for h in _HEALS if h == "algorithm_state" or any(h in p.heals for p in policies))
    before = all(p.commit == "before_optimizer_step" for p in policies)
    rederives = tuple(dict.fromkeys([_TRIALS_AGAIN, *(r for p in policies for r in p.rederives)]))
    return FaultTolerance(heals=heals, rederives=rederives, commit="before_optimizer_step" if before else "after_step")


def _build(name: str, optimizers: Sequence[torch.optim.Optimizer], on_one_node: bool) -> Algorithm:
    cls = algorithm_registry.get(name)
    try:
        config = cls.Config(name=name)
        return cls.from_config(without_hierarchy(config) if on_one_node else config, optimizers=optimizers)
    except Exception as exc:
        raise BaguaConfigError(f"algorithm 'auto': candidate {name!r} cannot be built with its default options: "
                               f"{type(exc).__name__}: {exc}") from exc


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [AutoAlgorithm]
