"""The multi-rank reference tests at 8 ranks (and an odd count where the algorithm allows one), for every
algorithm whose semantics depend on the number of ranks: shift_one's partners, the low-precision ring's
neighbours, bytegrad's chunking by n, hierarchical forms with several ranks per node, decentralized_dp's
topologies (one-peer-exp at 8 = 2^3, alternating-exp-ring over 4 and 8 nodes), qadam, powersgd, diloco's
streaming fragments and async's ranks that stop at different steps.

Each test runs the worker of the 2/3/4-rank test that compares with its reference implementation
(imported from that test module) with n = 8; run them with ``python -m pytest -m slow -k eight``.
Nodes are emulated by ``local_size`` (``GROUP_RANK = rank // local_size``, see ``tests.distributed``).
"""

from __future__ import annotations

import pytest
import torch

from bagua_algorithms.bytegrad import ByteGradAlgorithm
from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithm
from tests import (
    test_async_model_average,
    test_bytegrad,
    test_bytegrad_exact,
    test_decentralized,
    test_decentralized_dp_wrapper,
    test_diloco,
    test_gradient_allreduce,
    test_low_precision_decentralized,
    test_low_precision_decentralized_exact,
    test_powersgd,
    test_qadam,
)
from tests.distributed import run_workers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TIMEOUT = 240.0
"""Seconds before ``run_workers`` kills the job and names the ranks that hung (8 ranks share 2 cores)."""


@pytest.mark.parametrize("local_size,cases", [
    # 8 peers: shift_one pairs rank r with 4 + (s + r) % 4 (r < 4); communication intervals shift the round
    (1, [("shift_one", 1, False, True), ("shift_one", 3, False, False), ("all", 2, False, True)]),
    # 4 nodes of 2: the intra-node average first, then shift_one among the 4 leaders
    (2, [("shift_one", 1, True, True), ("all", 1, True, True), ("shift_one", 1, False, True)]),
    # 2 nodes of 4
    (4, [("shift_one", 2, True, False), ("all", 1, True, True)]),
])
def test_decentralized_eight(local_size: int, cases: list[tuple]) -> None:
    run_workers(test_decentralized._check_cases, 8, cases, local_size, local_size=local_size, timeout=TIMEOUT)


def test_decentralized_all_five() -> None:
    run_workers(test_decentralized._check_cases, 5, [("all", 1, False, True), ("all", 1, True, True)], 5,
                local_size=5, timeout=TIMEOUT)


@pytest.mark.parametrize("world_size,local_size,cases", [
    (8, 1, [(False, 1), (True, 2)]),  # a ring of 8; hierarchical with one rank per node is the same ring
    (8, 2, [(True, 1), (False, 1)]),  # a ring of 4 nodes; a ring of 8 ranks
    (5, 5, [(False, 1)]),             # an odd ring
])
def test_low_precision_decentralized_eight(world_size: int, local_size: int, cases: list) -> None:
    run_workers(test_low_precision_decentralized._run, world_size, cases, local_size, local_size=local_size,
                timeout=TIMEOUT)


def test_low_precision_decentralized_exact_eight() -> None:
    """Bit for bit, a ring of 8 (the odd ring of 5 is in the test above)."""
    run_workers(test_low_precision_decentralized_exact._exact, 8, timeout=TIMEOUT)


def test_bytegrad_exact_eight() -> None:
    """Chunking by n, bit for bit: 5 elements in 8 chunks leave chunks with no real element (odd n: the
    5-rank training test below pads buckets to a multiple of 5)."""
    run_workers(test_bytegrad_exact._exact, 8, timeout=TIMEOUT)


@pytest.mark.parametrize("world_size,local_size,algorithm,bucket_size", [
    (8, 8, ByteGradAlgorithm(hierarchical=False), 300),
    (8, 2, {"name": "bytegrad", "hierarchical": True}, 512),  # 4 leaders exchange compressed chunks
    (5, 5, {"name": "bytegrad", "hierarchical": False}, 300),
])
def test_bytegrad_training_eight(world_size: int, local_size: int, algorithm: object, bucket_size: int) -> None:
    run_workers(test_bytegrad._train, world_size, algorithm, bucket_size, local_size=local_size, timeout=TIMEOUT)


@pytest.mark.parametrize("world_size,local_size,algorithm,do_flatten,bucket_size", [
    (8, None, GradientAllReduceAlgorithm(hierarchical=False), True, 300),
    (8, 2, GradientAllReduceAlgorithm(hierarchical=True), True, 512),
    (8, 4, {"name": "gradient_allreduce", "hierarchical": True}, False, 10 * 1024 * 1024),
    (5, None, {"name": "gradient_allreduce", "average": True}, False, 512),
])
def test_gradient_allreduce_eight(world_size, local_size, algorithm, do_flatten, bucket_size) -> None:
    results = run_workers(test_gradient_allreduce._compare_with_ddp, world_size, algorithm, do_flatten, bucket_size,
                          local_size=local_size, timeout=TIMEOUT)
    for rank, other in enumerate(results[1:], start=1):
        for a, b in zip(results[0], other):
            assert torch.equal(a, b), f"rank {rank} differs from rank 0"  # bit-identical


@pytest.mark.parametrize("world_size,local_size,by_name,hierarchical", [(8, 8, True, False), (8, 2, False, True)])
def test_qadam_eight(world_size: int, local_size: int, by_name: bool, hierarchical: bool) -> None:
    run_workers(test_qadam._run, world_size, by_name, hierarchical, local_size=local_size, timeout=TIMEOUT)


def test_powersgd_eight() -> None:
    run_workers(test_powersgd._many_buckets, 8, 6, timeout=TIMEOUT)


@pytest.mark.parametrize("case", ["streaming+MinMaxUInt4", "streaming, no overlap", "diloco+ScaledSign+ef"])
def test_diloco_eight(case: str) -> None:
    run_workers(test_diloco._run_both, 8, test_diloco.CASES[case], 9, timeout=TIMEOUT)


def test_async_eight() -> None:
    """Ranks stop after 3, 6, ..., 24 steps; abort leaves every rank at the same weights."""
    run_workers(test_async_model_average._abort_during_warmup, 8, timeout=TIMEOUT)


def test_decentralized_dp_topologies_eight() -> None:
    """complete, ring of 8, one-peer-exp over 2^3 ranks, alternating-exp-ring over 4 nodes of 2 and 8 nodes
    of 1, each against the single-process simulation; global_avg exact."""
    wrapper = test_decentralized_dp_wrapper
    results = run_workers(wrapper._train_every_topology, 8, local_size=2, timeout=TIMEOUT)
    for index, (name, local) in enumerate(wrapper.CASES):
        per_rank = [r[index] for r in results]
        for rank, (result, expected_params) in enumerate(zip(per_rank, wrapper._simulate(name, local, 8))):
            for ours, expected in zip(result["before"], expected_params):
                torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-6, msg=f"{name}/{local} rank {rank}")
        if name != "complete":  # gossip leaves the ranks different before global_avg
            assert any(not torch.equal(a, b) for a, b in zip(per_rank[0]["before"], per_rank[-1]["before"])), name
        means = [torch.stack(ps).mean(0) for ps in zip(*(r["before"] for r in per_rank))]
        for result in per_rank:
            for ours, first, mean in zip(result["after"], per_rank[0]["after"], means):
                assert torch.equal(ours, first), f"{name}: global_avg must leave every rank identical"
                torch.testing.assert_close(ours, mean, rtol=1e-5, atol=1e-6)
