"""CUDA kernels: identical bytes and values to the CPU kernels (run wherever a CUDA device exists)."""

from __future__ import annotations

import pytest
import torch

from bagua_algorithms.low_precision_decentralized import kernels as lpd
from bagua_algorithms.low_precision_decentralized.kernels import reference as lpd_reference
from bagua_algorithms.q_adam import kernels as qadam_kernels
from bagua_codecs import minmax_kernels as minmax
from bagua_codecs.minmax_kernels import fallback
from bagua_core.runtime import native
from bagua_core.runtime.native import cuda

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def test_cuda_kernels_are_loaded() -> None:
    if native.backend == "native" and not cuda.available():
        pytest.fail(f"CUDA exists but the kernels do not load: {cuda.unavailable_reason()}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("numel,n_chunks", [(1, 1), (1000, 7), (5, 8), (1 << 20, 4), (3_000_001, 3)])
def test_cuda_matches_cpu(dtype: torch.dtype, numel: int, n_chunks: int) -> None:
    x = (torch.randn(numel, generator=torch.Generator().manual_seed(numel)) * 2).to(dtype)
    on_cpu = minmax.compress_minmax_uint8(x, n_chunks)
    on_gpu = minmax.compress_minmax_uint8(x.cuda(), n_chunks)
    assert on_gpu.is_cuda and torch.equal(on_gpu.cpu(), on_cpu)
    assert torch.equal(fallback.compress(x.cuda(), n_chunks, "raise").cpu(), on_cpu)
    for accumulate in (False, True):
        base = torch.randn(numel).to(dtype)
        expected = minmax.decompress_minmax_uint8(on_cpu, n_chunks, base.clone(), accumulate=accumulate)
        got = minmax.decompress_minmax_uint8(on_gpu, n_chunks, base.cuda(), accumulate=accumulate)
        assert torch.equal(got.cpu(), expected)


@pytest.mark.parametrize("average", [True, False])
def test_cuda_decompress_average(average: bool) -> None:
    n, m = 4, 10_001
    x = torch.randn(n * m)
    expected = minmax.decompress_average_minmax_uint8(
        minmax.compress_minmax_uint8(x, n), n, torch.empty(m), average
    )
    stacked = minmax.compress_minmax_uint8(x.cuda(), n)
    got = minmax.decompress_average_minmax_uint8(stacked, n, torch.empty(m, device="cuda"), average)
    assert torch.equal(got.cpu(), expected)
    parts = list(stacked.view(n, -1).unbind(0))
    got = minmax.decompress_average_minmax_uint8(parts, n, torch.empty(m, device="cuda"), average)
    assert torch.equal(got.cpu(), expected)


def test_cuda_nonfinite() -> None:
    x = torch.randn(40, device="cuda")
    x[25] = float("nan")
    with pytest.raises(minmax.NonFiniteError, match="chunk 2"):
        minmax.compress_minmax_uint8(x, 4)
    buf = minmax.compress_minmax_uint8(x, 4, nonfinite="propagate")
    assert torch.equal(buf.cpu(), minmax.compress_minmax_uint8(x.cpu(), 4, nonfinite="propagate"))
    with pytest.raises(minmax.NonFiniteError, match="overflow"):
        minmax.compress_minmax_uint8(torch.full((16,), 1e30, device="cuda"))


@pytest.mark.parametrize("numel", [1, 4099, 3_000_001])
def test_cuda_lpd_kernels_match_cpu(numel: int) -> None:
    gen = torch.Generator().manual_seed(numel)
    x, w, left, right = (torch.randn(numel, generator=gen) * s for s in (1.0, 1.01, 0.99, 1.02))
    expected = lpd.lpd_difference(x, w, left, right, torch.empty_like(x))
    got = lpd.lpd_difference(x.cuda(), w.cuda(), left.cuda(), right.cuda(), torch.empty(numel, device="cuda"))
    assert torch.equal(got.cpu(), expected)
    reference = lpd_reference.lpd_diff(x.cuda(), w.cuda(), left.cuda(), right.cuda(), torch.empty(numel, device="cuda"))
    assert torch.equal(reference.cpu(), expected)  # the torch composition on CUDA gives the same bits
    q = [minmax.compress_minmax_uint8(torch.randn(numel, generator=gen), 1) for _ in range(3)]
    for shared in (False, True):
        q_left, q_right, q_own = q[0], q[0] if shared else q[1], q[2]
        cpu_state = [t.clone() for t in (w, left, right)] + [torch.zeros(numel)]
        gpu_state = [t.cuda() for t in cpu_state]
        lpd.lpd_update(q_left, q_right, q_own, *cpu_state, begin=numel // 3)
        lpd.lpd_update(q_left.cuda(), q_right.cuda(), q_own.cuda(), *gpu_state, begin=numel // 3)
        for a, b in zip(cpu_state, gpu_state):
            assert torch.equal(b.cpu(), a)


def test_adam_update_on_cuda_matches_cpu() -> None:
    gen = torch.Generator().manual_seed(0)
    p, m, v = torch.randn(100_003, generator=gen), torch.randn(100_003, generator=gen), torch.rand(100_003, generator=gen)
    expected, got = p.clone(), p.cuda()
    qadam_kernels.adam_update(expected, m, v, -1e-3, 0.7, 1e-8)
    qadam_kernels.adam_update(got, m.cuda(), v.cuda(), -1e-3, 0.7, 1e-8)
    assert torch.equal(got.cpu(), expected)
