"""``AutoAlgorithm``: the declaration, and the plan of candidates for the membership it is reified on
(the package docstring says how the choice is made)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from bagua_algorithms.auto.chooser import AutoImpl
from bagua_algorithms.auto.config import AUTO, AutoConfig, candidate_names
from bagua_core.api import (
    Algorithm,
    AlgorithmConfig,
    BaguaConfigError,
    Capabilities,
    FaultTolerance,
    Membership,
    algorithm_registry,
    defaults_to_hierarchical,
    on_one_node,
    without_hierarchy,
)

__all__ = ["AutoAlgorithm", "Plan"]

_HEALS = ("weights", "optimizer", "algorithm_state", "step")
_TRIALS_AGAIN = "the trials (a new quorum during them restarts them on it)"


class Plan(NamedTuple):
    """The candidates of one ``auto`` instance for one membership."""

    declarations: list[Algorithm]
    """The candidates, each built with the options it runs with, in trial order."""
    overrides: dict[str, dict[str, Any]]
    """The options each candidate runs with that differ from its defaults (the single-node variants)."""
    fault_tolerance: FaultTolerance | None
    """When replicas come and go: how this instance survives it (its candidates' policies joined); else None."""


class AutoAlgorithm(Algorithm):
    """Chooses, while training, the fastest candidate algorithm (see the package's docstring)."""

    name = AUTO
    Config = AutoConfig
    capabilities = Capabilities(
        communicates="gradients", keeps_optimizer_semantics=True, relative_bytes=None, supports_sharding=True,
        fault_tolerance=FaultTolerance(heals=_HEALS, commit="after_step", rederives=(_TRIALS_AGAIN,)))
    """During the trials the module's capabilities (``WrappedModule(module).capabilities``) are the current
    candidate's; when replicas come and go with the ``fault_tolerance`` of the plan's candidates, whichever runs."""

    def __init__(self, *, optimizers: Sequence[torch.optim.Optimizer] = (), **options: Any) -> None:
        """``options``: those of ``AutoConfig``; ``optimizers``: those given to ``with_bagua`` (a candidate
        that needs its own finds it there)."""
        if options.get("candidates") is not None:
            options["candidates"] = tuple(options["candidates"])
        super().__init__(**options)
        self.optimizers = list(optimizers)
        fixed = self.plan(Membership())  # a fail-fast job's membership
        self.declarations, self.overrides = fixed.declarations, fixed.overrides
        """The plan of a fail-fast job (:meth:`plan`)."""

    @classmethod
    def from_config(cls, config: AlgorithmConfig, optimizers: Sequence[torch.optim.Optimizer] = ()) -> AutoAlgorithm:
        return cls(**config.model_dump(exclude={"name"}), optimizers=optimizers)

    def plan(self, membership: Membership, sharded: bool = False) -> Plan:
        """The candidates for ``membership``: when replicas come and go, only those that declare fault
        tolerance (a ``candidates`` option naming another is refused), and every replica is a node (no
        single-node variants). ``sharded``: a model sharded with FSDP2, only those that support sharding."""
        changes = membership.changes
        names = list(self.config.candidates or candidate_names())
        if sharded:
            names = [n for n in names if algorithm_registry.get(n).capabilities.supports_sharding]
        if changes:
            refused = [n for n in names if algorithm_registry.get(n).capabilities.fault_tolerance is None]
            if self.config.candidates and refused:
                raise BaguaConfigError(f"algorithm 'auto': candidate(s) {refused} cannot run in fault-tolerant mode "
                                       f"(they declare no Capabilities.fault_tolerance); leave them out of "
                                       f"candidates or run without --fault-tolerant")
            names = [n for n in names if n not in refused]
        if not names:
            raise BaguaConfigError("algorithm 'auto': no installed algorithm declares keeps_optimizer_semantics"
                                   f"{' and fault tolerance' if changes else ''} (bagua plugins lists the "
                                   "capabilities)")
        flat = on_one_node() and not changes  # when replicas come and go every replica is a node
        declarations = [_build(name, self.optimizers, flat) for name in names]
        overrides = {d.name: {"hierarchical": False} for d in declarations
                     if flat and defaults_to_hierarchical(type(d.config))}
        return Plan(declarations, overrides, _fault_tolerance(declarations) if changes else None)

    def canonical_options(self) -> dict[str, Any]:
        """The options and every candidate with its options (ranks with other plugins installed differ)."""
        return {**super().canonical_options(),
                "candidates": {d.name: d.canonical_options() for d in self.declarations}}

    def reify(self, process_group: Any) -> AutoImpl:
        membership = process_group.membership
        return AutoImpl(process_group, self.config, self.plan(membership),
                        sharded_plan=lambda: self.plan(membership, sharded=True))


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
