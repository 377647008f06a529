"""Topologies: built-ins partition the ranks every round, size conditions raise clear errors, a third
party registers its own through ``bagua_register_topologies``, single-rank edges mix nothing."""

from __future__ import annotations

import pytest
import torch

from bagua_algorithms.decentralized_dp import Edge, Topology, get_topology, mix_inplace, topology_names
from bagua_core.runtime.exceptions import BaguaConfigError, UnknownNameError
from bagua_core.plugins import get_plugin_manager, hookimpl

VALID = [("complete", 1, 1), ("complete", 3, 3), ("ring", 2, 2), ("ring", 6, 6), ("one-peer-exp", 2, 2),
         ("one-peer-exp", 8, 8), ("alternating-exp-ring", 4, 1), ("alternating-exp-ring", 4, 2),
         ("alternating-exp-ring", 8, 2), ("alternating-exp-ring", 16, 4)]


def test_builtins_are_registered() -> None:
    assert {"complete", "ring", "one-peer-exp", "alternating-exp-ring"} <= set(topology_names())


@pytest.mark.parametrize("name,world,local", VALID)
def test_every_rank_in_exactly_one_edge_per_round(name: str, world: int, local: int) -> None:
    topology = get_topology(name, world, local)
    for step in range(2 * topology.period):
        ranks = sorted(r for e in topology.edges(step) for r in e.ranks)
        assert ranks == list(range(world))
        for rank in range(world):
            assert rank in topology.edge(rank, step).ranks


def test_edges_of_the_builtins() -> None:
    ring = get_topology("ring", 4)
    assert [e.ranks for e in ring.edges(0)] == [(0, 1), (2, 3)]
    assert [e.ranks for e in ring.edges(1)] == [(0, 3), (1, 2)]
    assert get_topology("complete", 4).edge(2, 7) == Edge((0, 1, 2, 3), 0.25)
    exp = get_topology("one-peer-exp", 8)
    assert exp.period == 3 and exp.edge(1, 2) == Edge((1, 5), 0.5)
    # alternating-exp-ring as published in decent-dp 0.2.3 (the rounds of its _get_topo_edges, checked
    # against the package): node pairs (j, j + 2^i) staggered, so some pair mixes across nodes every step
    alt = get_topology("alternating-exp-ring", 8, 2)
    assert [[(e.ranks, e.weight) for e in alt.edges(r)] for r in range(alt.period)] == [
        [((0, 1), 0.5), ((2, 3), 0.5), ((4, 5, 6, 7), 0.25)],
        [((0, 1, 2, 3), 0.25), ((4, 5), 0.5), ((6, 7), 0.5)],
        [((0, 1), 0.5), ((4, 5), 0.5), ((2, 3, 6, 7), 0.25)],
        [((0, 1, 4, 5), 0.25), ((2, 3), 0.5), ((6, 7), 0.5)],
    ]
    single = get_topology("alternating-exp-ring", 4, 1)  # one rank per node: every step has a mixing pair
    assert [[e.ranks for e in single.edges(r)] for r in range(single.period)] == [
        [(0,), (1,), (2, 3)], [(0, 1), (2,), (3,)], [(0,), (2,), (1, 3)], [(0, 2), (1,), (3,)]]
    assert all(any(e.size > 1 for e in single.edges(r)) for r in range(4))


@pytest.mark.parametrize("name,world,local,message", [
    ("ring", 3, 3, "even number of ranks"),
    ("ring", 1, 1, "even number of ranks"),
    ("one-peer-exp", 6, 6, "power-of-two number of ranks"),
    ("alternating-exp-ring", 4, 4, "power-of-two number of nodes >= 2, got 1"),
    ("alternating-exp-ring", 6, 2, "got 3"),
    ("complete", 4, 3, "local_world_size must be a positive divisor"),
])
def test_world_size_conditions(name: str, world: int, local: int, message: str) -> None:
    with pytest.raises(BaguaConfigError, match=message):
        get_topology(name, world, local)


def test_unknown_name_lists_the_available_ones() -> None:
    with pytest.raises(UnknownNameError, match="unknown topology 'star'; available: alternating-exp-ring, complete"):
        get_topology("star", 4)


class StarTopology(Topology):
    name = "test-star"

    def rounds(self):
        return [[((0, peer), 0.5)] + [((r,), 1.0) for r in range(1, self.world_size) if r != peer]
                for peer in range(1, self.world_size)]


class BrokenTopology(Topology):
    name = "test-broken"

    def rounds(self):
        return [[((0, 1), 0.5), ((1, 2), 0.5)]]


class _ThirdParty:
    @staticmethod
    @hookimpl
    def bagua_register_topologies():
        return [StarTopology, BrokenTopology]


def test_a_third_party_registers_a_topology() -> None:
    pm = get_plugin_manager()
    pm.register(_ThirdParty, name="test-topologies")
    try:
        star = get_topology("test-star", 3)
        assert star.period == 2 and star.edge(2, 1) == Edge((0, 2), 0.5)
        with pytest.raises(BaguaConfigError, match="every rank must be in exactly one edge"):
            get_topology("test-broken", 3)
    finally:
        pm.unregister(name="test-topologies")
    assert "test-star" not in topology_names()


def test_single_rank_edge_mixes_nothing() -> None:
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(mix_inplace(x, torch.tensor([5.0, 5.0]), Edge((3,), 1.0)), torch.tensor([1.0, 2.0]))
    y = torch.tensor([1.0, 3.0])  # three ranks, w = 1/2: x/2 + (sum - x)/4
    mix_inplace(y, torch.tensor([6.0, 6.0]), Edge((0, 1, 2), 0.5))
    assert torch.allclose(y, torch.tensor([1.75, 2.25]))


# --- fault-tolerant mode: the topology is derived from each quorum's size ------------------------------
BUILTINS = ("complete", "ring", "one-peer-exp", "alternating-exp-ring")


@pytest.mark.parametrize("name", BUILTINS)
def test_any_size_partitions_every_quorum_and_keeps_the_valid_sizes(name: str) -> None:
    for local in (1, 2, 4):
        for world in range(local, 17, local):
            derived = get_topology(name, world, local, any_size=True)  # never refused: a quorum may be any size
            for step in range(derived.period):
                assert sorted(r for e in derived.edges(step) for r in e.ranks) == list(range(world))
                assert all(e.size > 1 or e.weight == 1.0 for e in derived.edges(step))  # alone: keeps its own
            try:
                own = get_topology(name, world, local)
            except BaguaConfigError:
                continue
            assert [derived.edges(s) for s in range(derived.period)] == [own.edges(s) for s in range(own.period)]


def test_any_size_rules_at_odd_quorums() -> None:
    ring = get_topology("ring", 3, 3, any_size=True)
    assert [[e.ranks for e in ring.edges(s)] for s in range(2)] == [[(0, 1), (2,)], [(0,), (1, 2)]]
    assert [[e.ranks for e in get_topology("ring", 1, 1, any_size=True).edges(s)] for s in range(2)] == [[(0,)]] * 2
    exp = get_topology("one-peer-exp", 3, 3, any_size=True)
    assert [[e.ranks for e in exp.edges(s)] for s in range(2)] == [[(0, 1), (2,)], [(0, 2), (1,)]]
    nodes = get_topology("alternating-exp-ring", 6, 2, any_size=True)  # three nodes of two: node 2 unpaired at first
    assert Edge((4, 5), 0.5) in nodes.edges(0) and Edge((4, 5), 0.5) in nodes.edges(1)
    assert Edge((0, 1, 4, 5), 0.25) in nodes.edges(2)


def test_a_topology_not_declaring_any_size_is_refused_at_a_quorum_it_cannot_build() -> None:
    class EvenOnly(Topology):
        name = "test-even-only"

        def check_world_size(self) -> None:
            if self.world_size % 2:
                raise BaguaConfigError(f"test-even-only needs an even number of ranks, got {self.world_size}")

        def rounds(self):
            return [[((i, i + 1), 0.5) for i in range(0, self.world_size, 2)]]

    assert EvenOnly(4, any_size=True).period == 1
    with pytest.raises(BaguaConfigError, match="got 3; fault-tolerant mode derives the topology from each quorum "
                                               r"\(3 ranks now\), and EvenOnly does not declare any_world_size"):
        EvenOnly(3, any_size=True)
