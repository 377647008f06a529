"""The allreduce of small tensors on gloo (recursive doubling over point-to-point messages): the same
results as gloo's allreduce, bit-identical on every rank, used only up to the agreed threshold."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import bagua_core as bagua
from bagua_core.runtime import env
from bagua_core.runtime.communication import common
from bagua_core.runtime.communication.reduce_op import TORCH_OPS, ReduceOp
from bagua_core.runtime.process_group import get_default_group
from tests.distributed import WorkerFailure, run_workers

CASES = [
    (torch.float32, ReduceOp.SUM),
    (torch.float32, ReduceOp.AVG),
    (torch.float32, ReduceOp.MAX),
    (torch.float32, ReduceOp.MIN),
    (torch.float64, ReduceOp.PRODUCT),
    (torch.float16, ReduceOp.SUM),
    (torch.int64, ReduceOp.SUM),
    (torch.int32, ReduceOp.AVG),
    (torch.int64, ReduceOp.BOR),
    (torch.int64, ReduceOp.BAND),
    (torch.uint8, ReduceOp.BXOR),
    (torch.cfloat, ReduceOp.SUM),
]


def _value(rank: int, dtype: torch.dtype, numel: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + rank)
    if dtype.is_complex:
        return torch.randn(numel, generator=gen, dtype=dtype)
    if dtype.is_floating_point:
        return (1 + 0.1 * torch.randn(numel, generator=gen, dtype=torch.float64)).to(dtype)
    return torch.randint(0, 200, (numel,), generator=gen).to(dtype)


def _compare_with_gloo(rank: int) -> list[torch.Tensor]:
    comm = get_default_group().get_global_communicator()
    assert comm.small_allreduce_bytes == env.DEFAULT_SMALL_ALLREDUCE_BYTES
    used = []
    original = common.small_allreduce_inplace
    common.small_allreduce_inplace = lambda tensor, op, c: (used.append(tensor.numel()), original(tensor, op, c))
    try:
        ours = []
        for dtype, op in CASES:
            value = _value(rank, dtype, 1001)
            got = value.clone()
            bagua.allreduce_inplace(got, op=op)
            reference = torch.view_as_real(value.clone()) if dtype.is_complex else value.clone()
            dist.all_reduce(reference, op=TORCH_OPS[ReduceOp.SUM if op == ReduceOp.AVG else op])
            if dtype.is_complex:
                reference = torch.view_as_complex(reference)
            if op == ReduceOp.AVG:
                common.finish_average(reference, comm.nranks())
            if dtype.is_floating_point or dtype.is_complex:  # gloo's order of additions is its own
                tolerance = 1e-2 if dtype == torch.float16 else 1e-5
                torch.testing.assert_close(got, reference, rtol=tolerance, atol=tolerance)
            else:
                assert torch.equal(got, reference), (dtype, op)
            ours.append(got)
        small_calls = len(used)
        large = torch.ones(env.DEFAULT_SMALL_ALLREDUCE_BYTES // 4 + 1)  # one element over the threshold
        bagua.allreduce_inplace(large, op=ReduceOp.SUM)
        assert torch.equal(large, torch.full_like(large, float(comm.nranks())))
        assert len(used) == small_calls == len(CASES), used
        flags = torch.ones(8, dtype=torch.bool)  # bool stays on gloo
        bagua.allreduce_inplace(flags, op=ReduceOp.SUM)
        assert len(used) == len(CASES)
    finally:
        common.small_allreduce_inplace = original
    return ours


@pytest.mark.parametrize("world_size", [3, 4, 5])  # 3 and 5: ranks beyond the largest power of two
def test_small_allreduce_matches_gloo_and_is_bit_identical(world_size: int) -> None:
    results = run_workers(_compare_with_gloo, world_size)
    for rank in range(1, world_size):
        for (dtype, op), first, mine in zip(CASES, results[0], results[rank]):
            assert first.dtype == dtype
            assert torch.equal(first, mine), f"rank {rank} differs from rank 0 for {dtype} {op.name}"


def _threshold(rank: int) -> int:
    value = torch.ones(16)
    bagua.allreduce_inplace(value)
    assert torch.equal(value, torch.full((16,), 2.0))
    return get_default_group().get_global_communicator().small_allreduce_bytes


def test_threshold_zero_turns_it_off() -> None:
    assert run_workers(_threshold, 2, env={"BAGUA_SMALL_ALLREDUCE_BYTES": "0"}) == [0, 0]


def test_threshold_that_differs_between_ranks_raises_on_every_rank() -> None:
    with pytest.raises(WorkerFailure) as info:
        run_workers(_threshold, 3, rank_env={1: {"BAGUA_SMALL_ALLREDUCE_BYTES": "4096"}}, timeout=60)
    message = str(info.value)
    assert "hung" not in message
    for rank in range(3):
        assert f"--- rank {rank} failed" in message
    assert "must be the same on every rank" in message and "rank 1: 4096" in message and "rank 0: (unset)" in message


def test_bad_threshold_is_named() -> None:
    with pytest.raises(ValueError, match="BAGUA_SMALL_ALLREDUCE_BYTES must be a number of bytes >= 0"):
        env.get_small_allreduce_bytes("-5")
    with pytest.raises(ValueError, match="got 'lots'"):
        env.get_small_allreduce_bytes("lots")
    assert env.get_small_allreduce_bytes("") == env.DEFAULT_SMALL_ALLREDUCE_BYTES
    assert env.get_small_allreduce_bytes("0") == 0
