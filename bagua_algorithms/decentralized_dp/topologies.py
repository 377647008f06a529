"""Built-in topologies, registered through the ``bagua_register_topologies`` hook like any plugin's.

``complete``: one edge of every rank, ``w = 1/n`` (exact averaging every step).
``ring`` (even n): period 2, rank ``i`` pairs with ``i+1`` on even steps and ``i-1`` on odd ones
(even ``i``), ``w = 1/2``.
``one-peer-exp`` (n = 2^k, k >= 1): period k, round ``i`` pairs ``j`` with ``j + 2^i`` (``j`` whose bit
``i`` is 0), ``w = 1/2``.
``alternating-exp-ring`` (nodes of ``L = local_world_size`` consecutive ranks, a power-of-two number of
nodes ``N >= 2``, ``K = log2(N)``), as published in decent-dp 0.2.3: period ``2K``. For ``i`` in
``0..K-1`` the node pairs ``(j, j + 2^i)`` (``j`` with bit ``i`` clear, in increasing order) are numbered
by a counter ``c`` running over all ``i``; in rounds ``2i`` and ``2i+1`` a pair with even ``c`` first
averages inside each of its two nodes (``w = 1/L``) and then over its ``2L`` ranks together
(``w = 1/(2L)``); a pair with odd ``c`` does the two the other way round. Pairs are thus staggered: in
every step some pairs mix across the network. With one rank per node the inside-node edges have one
rank and mix nothing (decent-dp divides by zero there). The edges of each round are the package's,
in its order.

Example::

    >>> get_topology("one-peer-exp", world_size=4).edges(1)
    (Edge(ranks=(0, 2), weight=0.5), Edge(ranks=(1, 3), weight=0.5))
"""

from __future__ import annotations

from collections.abc import Sequence

from bagua_algorithms.decentralized_dp import hookspecs
from bagua_algorithms.decentralized_dp.topology import Topology
from bagua_core.api import BaguaConfigError, hookimpl

__all__ = ["AlternatingExpRingTopology", "CompleteTopology", "OnePeerExpTopology", "RingTopology"]

Round = list[tuple[Sequence[int], float]]


def _is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


class CompleteTopology(Topology):
    name = "complete"
    any_world_size = True

    def rounds(self) -> list[Round]:
        return [[(range(self.world_size), 1.0 / self.world_size)]]


def _alone(ranks: Sequence[int]) -> Round:
    """Edges of one rank each: they mix nothing (``w = 1``)."""
    return [((rank,), 1.0) for rank in ranks]


class RingTopology(Topology):
    name = "ring"
    any_world_size = True  # an odd size (a quorum): one rank per round has no partner

    def check_world_size(self) -> None:
        if self.world_size < 2 or self.world_size % 2:
            raise BaguaConfigError(f"topology 'ring' needs an even number of ranks >= 2, got {self.world_size}")

    def rounds(self) -> list[Round]:
        n = self.world_size
        if n % 2 == 0:
            forward = [((i, i + 1), 0.5) for i in range(0, n, 2)]
            backward = [((i, (i - 1) % n), 0.5) for i in range(0, n, 2)]
            return [forward, backward]
        # odd n (fault-tolerant mode): the path 0-1-...-(n-1), its even links then its odd ones; the
        # rank at the end of the path without a link that round keeps its parameters
        forward = [((i, i + 1), 0.5) for i in range(0, n - 1, 2)] + _alone([n - 1])
        backward = _alone([0]) + [((i, i + 1), 0.5) for i in range(1, n - 1, 2)]
        return [forward, backward]


def _exponent_rounds(count: int) -> int:
    """Rounds of the exponential pairings of ``count`` members: ceil(log2(count)), at least one."""
    return max(1, (count - 1).bit_length())


class OnePeerExpTopology(Topology):
    name = "one-peer-exp"
    any_world_size = True  # other sizes (a quorum): a rank whose partner j + 2^i does not exist sits out

    def check_world_size(self) -> None:
        if self.world_size < 2 or not _is_power_of_two(self.world_size):
            raise BaguaConfigError(
                f"topology 'one-peer-exp' needs a power-of-two number of ranks >= 2, got {self.world_size}"
            )

    def rounds(self) -> list[Round]:
        n = self.world_size
        result: list[Round] = []
        for i in range(_exponent_rounds(n)):
            paired = [((j, j + (1 << i)), 0.5) for j in range(n) if not j & (1 << i) and j + (1 << i) < n]
            members = {r for ranks, _ in paired for r in ranks}
            result.append(paired + _alone([r for r in range(n) if r not in members]))
        return result


class AlternatingExpRingTopology(Topology):
    name = "alternating-exp-ring"
    any_world_size = True  # other node counts (a quorum): an unpaired node averages inside itself

    def check_world_size(self) -> None:
        if self.num_nodes < 2 or not _is_power_of_two(self.num_nodes):
            raise BaguaConfigError(
                "topology 'alternating-exp-ring' needs a power-of-two number of nodes >= 2, got "
                f"{self.num_nodes} (world size {self.world_size}, {self.local_world_size} ranks per node)"
            )

    def rounds(self) -> list[Round]:
        size, nodes = self.local_world_size, self.num_nodes

        def node(k: int) -> range:
            return range(k * size, (k + 1) * size)

        result: list[Round] = []
        counter = 0
        for i in range(_exponent_rounds(nodes)):
            first: Round = []
            second: Round = []
            paired: set[int] = set()
            for j in range(nodes):
                t = j + (1 << i)
                if j & (1 << i) or t >= nodes:
                    continue
                paired |= {j, t}
                pair = ([*node(j), *node(t)], 1.0 / size / 2.0)
                inside = [(node(j), 1.0 / size), (node(t), 1.0 / size)]
                if counter % 2 == 0:
                    first += inside
                    second.append(pair)
                else:
                    first.append(pair)
                    second += inside
                counter += 1
            # a node without a partner this period (not a power-of-two count: a quorum) averages inside itself
            alone = [(node(j), 1.0 / size) for j in range(nodes) if j not in paired]
            result += [first + alone, second + alone]
        return result


@hookimpl
def bagua_add_hookspecs(plugin_manager) -> None:
    plugin_manager.add_hookspecs(hookspecs)  # this package's spec, whichever of its plugins is enabled


@hookimpl
def bagua_register_topologies() -> list[type[Topology]]:
    return [CompleteTopology, RingTopology, OnePeerExpTopology, AlternatingExpRingTopology]
