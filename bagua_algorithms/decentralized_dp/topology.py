"""Communication topologies of decentralized data parallel: ``Edge``, the ``Topology`` base, the registry.

A topology is a periodic sequence of rounds; in every round the ranks are partitioned into edges
(each rank in exactly one edge) and each edge mixes its members' parameters with
``x <- w*x + (1-w)/(|R|-1) * (sum of the other members' x)``. Third parties add topologies with the
``bagua_register_topologies`` hook (spec in :mod:`bagua_algorithms.decentralized_dp.hookspecs`); built-ins live in :mod:`bagua_algorithms.decentralized_dp.topologies`.

Example::

    >>> topology = get_topology("ring", world_size=4)
    >>> topology.edge(rank=1, step=0)
    Edge(ranks=(0, 1), weight=0.5)
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from bagua_core.api import BaguaConfigError, BaguaProcessGroup, NamedRegistry

__all__ = ["Edge", "Topology", "get_topology", "mix_inplace", "topology_names", "topology_registry"]

topology_registry: NamedRegistry = NamedRegistry("topology", "bagua_register_topologies")
"""Every installed topology class by name, filled through the ``bagua_register_topologies`` spec
(:mod:`bagua_algorithms.decentralized_dp.hookspecs`)."""


@dataclasses.dataclass(frozen=True)
class Edge:
    """A set of ranks that mix their parameters in one round, each keeping ``weight`` of its own."""

    ranks: tuple[int, ...]
    """Global ranks of the members, sorted."""
    weight: float
    """The weight ``w`` a member keeps of its own parameters; the others share ``1 - w`` equally."""
    group: Any = dataclasses.field(default=None, compare=False, repr=False)
    """The torch process group of the members (None for a single-rank edge or before ``build_groups``)."""

    @property
    def size(self) -> int:
        return len(self.ranks)


def mix_inplace(x: torch.Tensor, total: torch.Tensor, edge: Edge) -> torch.Tensor:
    """``x <- w*x + (1-w)/(|R|-1) * (total - x)`` where ``total`` is the SUM of ``x`` over the edge.

    A single-rank edge has nothing to mix: ``x`` is returned unchanged (no division by zero)."""
    if edge.size > 1:
        others = (1.0 - edge.weight) / (edge.size - 1)
        x.mul_(edge.weight - others).add_(total, alpha=others)
    return x


class Topology(abc.ABC):
    """Base of every topology. Subclasses set ``name`` and implement :meth:`rounds`.

    Construction is local and deterministic: :meth:`check_world_size` and the partition check raise
    :class:`~bagua_core.runtime.exceptions.BaguaConfigError` identically on every rank. :meth:`build_groups` is
    collective (every rank creates the same torch groups in the same order).
    """

    name: ClassVar[str] = ""
    any_world_size: ClassVar[bool] = False
    """True when :meth:`rounds` builds a valid partition for every world size (and every number of
    nodes), coinciding with the topology's own where :meth:`check_world_size` accepts the size:
    fault-tolerant mode then derives it from every quorum (``any_size=True``)."""

    def __init__(self, world_size: int, local_world_size: int | None = None, *, any_size: bool = False) -> None:
        local_world_size = world_size if local_world_size is None else local_world_size
        if not isinstance(world_size, int) or world_size < 1:
            raise BaguaConfigError(f"world_size must be a positive integer, got {world_size!r}")
        if not isinstance(local_world_size, int) or local_world_size < 1 or world_size % local_world_size:
            raise BaguaConfigError(
                f"local_world_size must be a positive divisor of the world size {world_size}, got {local_world_size!r}"
            )
        self.world_size = world_size
        self.local_world_size = local_world_size
        self.num_nodes = world_size // local_world_size
        self.any_size = any_size and self.any_world_size
        """Built for a size its own check may refuse (fault-tolerant mode's quorum): see ``any_world_size``."""
        if not self.any_size:
            try:
                self.check_world_size()
            except BaguaConfigError as exc:
                if not any_size:
                    raise
                raise BaguaConfigError(
                    f"{exc}; fault-tolerant mode derives the topology from each quorum ({world_size} ranks now), "
                    f"and {type(self).__name__} does not declare any_world_size: use a topology that does "
                    f"(complete, ring, one-peer-exp, alternating-exp-ring)"
                ) from None
        self._rounds = [tuple(Edge(tuple(sorted(r)), float(w)) for r, w in edges) for edges in self.rounds()]
        self._validate()

    def check_world_size(self) -> None:  # noqa: B027  (an optional hook: any size by default)
        """Raise ``BaguaConfigError`` when the topology cannot be built for this world (default: any size)."""

    @abc.abstractmethod
    def rounds(self) -> list[list[tuple[Sequence[int], float]]]:
        """One period of rounds; each round is a list of ``(ranks, weight)`` edges partitioning the ranks."""

    # --- queries -------------------------------------------------------------------------------
    @property
    def period(self) -> int:
        return len(self._rounds)

    def edges(self, step: int) -> tuple[Edge, ...]:
        return self._rounds[step % self.period]

    def edge(self, rank: int, step: int) -> Edge:
        """The edge ``rank`` belongs to at training step ``step`` (0-based)."""
        return next(e for e in self.edges(step) if rank in e.ranks)

    # --- checks and groups -----------------------------------------------------------------------
    def _validate(self) -> None:
        if not self._rounds:
            raise BaguaConfigError(f"topology {self.name!r} has no rounds for world size {self.world_size}")
        everyone = list(range(self.world_size))
        for index, edges in enumerate(self._rounds):
            members = sorted(r for e in edges for r in e.ranks)
            if members != everyone:
                raise BaguaConfigError(
                    f"topology {self.name!r}, round {index}: every rank must be in exactly one edge, got "
                    f"{[list(e.ranks) for e in edges]} for ranks 0..{self.world_size - 1}"
                )
            for e in edges:
                if not 0.0 < e.weight <= 1.0:
                    raise BaguaConfigError(
                        f"topology {self.name!r}, round {index}: edge weight must be in (0, 1], got {e.weight}"
                    )

    def build_groups(self) -> None:
        """Create a torch process group per distinct multi-rank edge. Collective: same order everywhere."""
        groups: dict[tuple[int, ...], Any] = {}
        for edges in self._rounds:
            for e in edges:
                if e.size > 1 and e.ranks not in groups:
                    groups[e.ranks] = BaguaProcessGroup.new_torch_group(e.ranks)
        self._rounds = [
            tuple(dataclasses.replace(e, group=groups.get(e.ranks)) for e in edges) for edges in self._rounds
        ]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(world_size={self.world_size}, local_world_size={self.local_world_size})"


def topology_names() -> list[str]:
    """Names of every installed topology."""
    return topology_registry.names()


def get_topology(name: str, world_size: int, local_world_size: int | None = None, *,
                 any_size: bool = False) -> Topology:
    """Build the registered topology ``name`` (validated, groups not yet created). ``any_size``: for a
    size its own check may refuse, where the topology declares ``any_world_size`` (fault-tolerant mode).

    An unknown name raises an error listing the installed ones."""
    cls = topology_registry.get(name)
    if not (isinstance(cls, type) and issubclass(cls, Topology)):
        raise BaguaConfigError(f"topology {name!r} is provided by {cls!r}, which does not derive from Topology")
    return cls(world_size, local_world_size, any_size=any_size)
