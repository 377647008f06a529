"""What an algorithm declares about itself, so the core, the CLI, Lightning, autotune and other plugins
ask instead of knowing algorithms by name.

Every :class:`~bagua_core.lifecycle.algorithm.Algorithm` class carries one ``capabilities`` (class level). Nothing
here is communicated; :func:`capabilities_of` is what the core reads for a wrapped module: what the declaration
says of itself running its impl (``Algorithm.capabilities_for``).

Example::

    >>> from bagua_core import Algorithm, Capabilities
    >>> class MyAlgorithm(Algorithm):
    ...     name = "mine"
    ...     capabilities = Capabilities(tunable_bucket_size=True, keeps_optimizer_semantics=True,
    ...                                 relative_bytes=0.5)
    >>> MyAlgorithm.capabilities.keeps_optimizer_semantics
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bagua_core.runtime.exceptions import BaguaConfigError

__all__ = ["Capabilities", "FaultTolerance", "NOT_DECLARED", "capabilities_of"]


HEALABLE = ("weights", "optimizer", "algorithm_state", "step")
"""What a joiner can take from a live peer in fault-tolerant mode (``FaultTolerance.heals``)."""
COMMITS = ("before_optimizer_step", "after_step", "at_round")
"""Where a fault-tolerant transaction is decided (``FaultTolerance.commit``)."""


@dataclass(frozen=True)
class FaultTolerance:
    """How an algorithm survives a change of membership in fault-tolerant mode (``bagua_features.fault_tolerance``).

    ``heals``: what a joiner takes from a live peer (a subset of ``weights``, ``optimizer``,
    ``algorithm_state`` — the impl's ``state_dict`` — and ``step``). ``rederives``: what depends on the
    participants and is derived again from each step's quorum (free text for the docs and ``bagua
    plugins``, e.g. ``"chunking by world size"``, ``"averaging denominator"``): the runtime re-reifies
    the algorithm on each new quorum's group, so whatever its impl derives from the group is re-derived.
    ``commit``: where a step's transaction is decided: ``before_optimizer_step`` (a failed step is discarded by
    not stepping), ``after_step`` (a copy of weights, optimizer and algorithm state is restored on every survivor
    when the step fails) or ``at_round`` (a transaction spans a round of steps, from the copy taken before its
    first step to the decision after the step at which the impl's ``round_ends(module)`` says it ended; the quorum
    is joined before the step at which ``round_syncs(module)`` says the round's exchange starts).
    ``unsupported``: option values refused in that mode (below). ``per_replica_state``: what of the healed
    ``algorithm_state`` stays with its replica (below)."""

    heals: tuple[str, ...] = HEALABLE
    rederives: tuple[str, ...] = ()
    commit: Literal["before_optimizer_step", "after_step", "at_round"] = "after_step"
    unsupported: tuple[tuple[str, Any, str], ...] = ()
    """``(option, value, why)``: option values that cannot survive a change of membership; the algorithm is
    refused with them in fault-tolerant mode, naming the option and why."""
    per_replica_state: tuple[str, ...] = ()
    """Keys of the impl's ``state_dict`` that hold one replica's own state (an error-feedback accumulator: what
    this replica has not sent yet): a joiner does not take them from the live peer it heals from, so its freshly
    reified impl keeps its own (``load_state_dict`` gets the state without them); a failed step's copy restores
    them on every survivor like the rest of the state."""

    def __post_init__(self) -> None:
        unknown = [h for h in self.heals if h not in HEALABLE]
        if unknown:
            raise BaguaConfigError(f"FaultTolerance.heals may hold {', '.join(HEALABLE)}; got {unknown}")
        if self.commit not in COMMITS:
            raise BaguaConfigError(f"FaultTolerance.commit must be before_optimizer_step, after_step or at_round, "
                                   f"got {self.commit!r}")


@dataclass(frozen=True)
class Capabilities:
    """The typed declaration of an algorithm (``Algorithm.capabilities``). Defaults describe a plain,
    synchronous gradient-communicating algorithm that claims nothing special."""

    communicates: Literal["gradients", "weights", "momentum", "nothing"] = "gradients"
    """What the bucket operations exchange: gradients (before the optimizer step), weights (after it or
    in the background), the optimizer's momentum, or nothing."""
    tunable_bucket_size: bool = False
    """Autotune may rebuild the buckets with other sizes (and flip a boolean ``hierarchical`` on the
    impl) between steps: the buckets hold no state of their own across steps."""
    builds_optimizer: bool = False
    """The algorithm needs an optimizer of its own kind among those given to ``with_bagua``; a job
    builds it with ``Algorithm.build_optimizer(params, lr=..., steps_per_epoch=...)``."""
    background_work: bool = False
    """The impl runs communication in the background; it overrides ``AlgorithmImpl.abort(module)``
    (collective: stop it, returns once every rank aborted; call before destroying the process group) and
    ``resume(module)`` (restart it), which do nothing by default."""
    steps_optimizer_in_backward: bool = False
    """The optimizers are stepped inside backward by the algorithm: ``optimizer.step()`` is then a
    no-op that accepts no closure (Lightning runs the closure first)."""
    communicates_after_optimizer_step: bool = False
    """The impl may issue collectives after the optimizer step; which steps do is asked each step from
    ``AlgorithmImpl.communicates_after_optimizer_step`` (non-finite gradients are then agreed first)."""
    weights_differ_across_ranks: bool = False
    """The ranks' weights (and optimizer states) differ while training: checkpoints keep every rank's
    own, and resuming does not overwrite them with rank 0's."""
    exact_resume: bool = True
    """Resuming from a checkpoint continues exactly as an uninterrupted run (False: depends on timing)."""
    keeps_optimizer_semantics: bool = False
    """Every step, the optimizer sees the ranks' averaged gradient (up to compression error) and the
    ranks' weights stay equal: a drop-in for plain allreduce, so ``algorithm="auto"`` may choose it."""
    relative_bytes: float | None = 1.0
    """Bytes handed to collectives per step relative to a plain allreduce of the gradients in their
    dtype, with the default options (None: depends on the options or on timing)."""
    fault_tolerance: FaultTolerance | None = None
    """How the algorithm survives a change of membership in fault-tolerant mode (what a joiner heals
    from a live peer, what is re-derived from each quorum, where a step commits); None: the algorithm is
    refused in that mode."""
    supports_sharding: bool = False
    """The algorithm runs on a model sharded with FSDP2 inside each node (``bagua_core.module.sharded``): on
    each rank's local shards, with the ranks of the other nodes that hold the same shard, its documented
    semantics applied per shard. False: ``with_bagua`` refuses a sharded model, naming the algorithm."""

    def __post_init__(self) -> None:
        if self.communicates not in ("gradients", "weights", "momentum", "nothing"):
            raise BaguaConfigError(f"Capabilities.communicates must be gradients, weights, momentum or nothing, "
                                   f"got {self.communicates!r}")
        if self.relative_bytes is not None and not self.relative_bytes >= 0:
            raise BaguaConfigError(f"Capabilities.relative_bytes must be >= 0 or None, got {self.relative_bytes!r}")


NOT_DECLARED = Capabilities()
"""The ``capabilities`` of the ``Algorithm`` base class: an algorithm whose class (or a base between it
and ``Algorithm``) sets none has declared nothing, and what its impl says in the older form counts."""


class _Declaration(Protocol):
    """An ``Algorithm`` (class or instance), as far as this module reads it. The algorithm layer sits
    above this module: it is described here, not imported."""

    name: str
    capabilities: Capabilities

    def capabilities_for(self, impl: Any) -> Capabilities: ...


class _Impl(Protocol):
    """An ``AlgorithmImpl``, as far as this module reads it (the core installs nothing else: ``checked_impl``)."""

    def _has_background_controls(self) -> bool: ...


def capabilities_of(declaration: _Declaration, impl: _Impl | None = None) -> Capabilities:
    """The capabilities of ``declaration`` (an ``Algorithm``): its class's, the defaults where it declares none;
    with the ``impl`` it runs, what the declaration says of itself running it (``Algorithm.capabilities_for``).
    Raises ``BaguaConfigError`` when the algorithm declares background work but its impl does not override
    ``abort``/``resume``."""
    if impl is None:
        declared = type(declaration).capabilities
        return Capabilities() if declared is NOT_DECLARED else declared
    caps = declaration.capabilities_for(impl)
    if caps.background_work and not impl._has_background_controls():
        raise BaguaConfigError(f"algorithm {declaration.name!r} declares background_work, but its impl "
                               f"{type(impl).__name__} does not override abort(module) and resume(module)")
    return caps
