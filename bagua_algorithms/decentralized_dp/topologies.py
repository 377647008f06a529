"""Built-in topologies, registered through the ``bagua_register_topologies`` hook like any plugin's.

``complete``: one edge of every rank, ``w = 1/n`` (exact averaging every step).
``ring`` (even n): period 2, rank ``i`` pairs with ``i+1`` on even steps and ``i-1`` on odd ones
(even ``i``), ``w = 1/2``.
``one-peer-exp`` (n = 2^k, k >= 1): period k, round ``i`` pairs ``j`` with ``j + 2^i`` (``j`` whose bit
``i`` is 0), ``w = 1/2``.
``alternating-exp-ring`` (nodes of ``local_world_size`` consecutive ranks, a power-of-two number of
nodes >= 2): even steps average inside each node (``w = 1/local_world_size``; one process per node
means nothing to mix); odd steps pair local rank ``l`` of node ``k`` with local rank ``l`` of node
``k xor 2^((s + l) mod K)`` across the network, ``w = 1/2`` (``s`` counts the inter-node rounds,
``K = log2(nodes)``), so different local ranks reach different nodes in the same step.

Example::

    >>> get_topology("one-peer-exp", world_size=4).edges(1)
    (Edge(ranks=(0, 2), weight=0.5), Edge(ranks=(1, 3), weight=0.5))
"""

from __future__ import annotations

from collections.abc import Sequence

from bagua_algorithms.decentralized_dp.topology import Topology
from bagua_core.exceptions import BaguaConfigError
from bagua_core.plugins import hookimpl

__all__ = ["AlternatingExpRingTopology", "CompleteTopology", "OnePeerExpTopology", "RingTopology"]

Round = list[tuple[Sequence[int], float]]


def _is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


class CompleteTopology(Topology):
    name = "complete"

    def rounds(self) -> list[Round]:
        return [[(range(self.world_size), 1.0 / self.world_size)]]


class RingTopology(Topology):
    name = "ring"

    def check_world_size(self) -> None:
        if self.world_size < 2 or self.world_size % 2:
            raise BaguaConfigError(f"topology 'ring' needs an even number of ranks >= 2, got {self.world_size}")

    def rounds(self) -> list[Round]:
        n = self.world_size
        forward = [((i, i + 1), 0.5) for i in range(0, n, 2)]
        backward = [((i, (i - 1) % n), 0.5) for i in range(0, n, 2)]
        return [forward, backward]


class OnePeerExpTopology(Topology):
    name = "one-peer-exp"

    def check_world_size(self) -> None:
        if self.world_size < 2 or not _is_power_of_two(self.world_size):
            raise BaguaConfigError(
                f"topology 'one-peer-exp' needs a power-of-two number of ranks >= 2, got {self.world_size}"
            )

    def rounds(self) -> list[Round]:
        n = self.world_size
        return [
            [((j, j + (1 << i)), 0.5) for j in range(n) if not j & (1 << i)]
            for i in range(n.bit_length() - 1)
        ]


class AlternatingExpRingTopology(Topology):
    name = "alternating-exp-ring"

    def check_world_size(self) -> None:
        if self.num_nodes < 2 or not _is_power_of_two(self.num_nodes):
            raise BaguaConfigError(
                "topology 'alternating-exp-ring' needs a power-of-two number of nodes >= 2, got "
                f"{self.num_nodes} (world size {self.world_size}, {self.local_world_size} ranks per node)"
            )

    def rounds(self) -> list[Round]:
        size, nodes = self.local_world_size, self.num_nodes
        exponents = nodes.bit_length() - 1
        intra = [(range(k * size, (k + 1) * size), 1.0 / size) for k in range(nodes)]
        result: list[Round] = []
        for s in range(exponents):
            inter = []
            for local in range(size):
                shift = 1 << ((s + local) % exponents)
                inter += [((k * size + local, (k ^ shift) * size + local), 0.5) for k in range(nodes) if not k & shift]
            result += [intra, inter]
        return result


@hookimpl
def bagua_register_topologies() -> list[type[Topology]]:
    return [CompleteTopology, RingTopology, OnePeerExpTopology, AlternatingExpRingTopology]
