"""The fused kernels give exactly (bit for bit) what composing the plain kernels gives, native and
torch alike: decompress-average with the min/max of what it wrote, headers from those stats,
quantise with the decompressed values, and the two passes of low_precision_decentralized against
the torch expression of DESIGN.md."""

from __future__ import annotations

import pytest
import torch

from bagua_algorithms.low_precision_decentralized import kernels as lpd
from bagua_algorithms.low_precision_decentralized.kernels import reference as lpd_reference
from bagua_algorithms.q_adam import kernels as qadam_kernels
from bagua_codecs import minmax_kernels as minmax
from bagua_codecs.minmax_kernels import fallback, fallback_fused
from bagua_codecs.minmax_kernels.layout import chunk_numel
from bagua_core.runtime import native

if native.backend == "native":
    from bagua_algorithms.low_precision_decentralized.kernels import cpu as lpd_cpu

BACKENDS = [fallback_fused] + ([minmax.cpu] if native.backend == "native" else [])  # type: ignore[attr-defined]
IDS = [m.__name__.rsplit(".", 1)[-1] for m in BACKENDS]
LPD_BACKENDS = [lpd_reference] + ([lpd_cpu] if native.backend == "native" else [])
LPD_IDS = [m.__name__.rsplit(".", 1)[-1] for m in LPD_BACKENDS]


def _values(numel: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(numel, generator=torch.Generator().manual_seed(seed)) * scale


def _segments(m: int, step: int) -> list[tuple[int, int]]:
    return [(b, min(b + step, m)) for b in range(0, m, step)] or [(0, 0)]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))


@pytest.mark.parametrize("impl", BACKENDS, ids=IDS)
@pytest.mark.parametrize("numel,n", [(1000, 3), (70001, 2), (5, 4), (300000, 2)])
def test_decompress_average_stats_then_headers(impl, numel: int, n: int) -> None:  # noqa: ANN001
    m = chunk_numel(numel, n)
    x = torch.cat([_values(numel, numel), _values(n * m - numel, 1)])
    bufs = minmax.compress_minmax_uint8(x, n)
    parts = list(bufs.view(n, -1).unbind(0))
    expected = minmax.decompress_average_minmax_uint8(bufs, n, torch.empty(m))
    own, stats = torch.full((m,), 7.0), minmax.minmax_stats()
    for begin, end in reversed(_segments(m, 4099)):
        impl.decompress_sum(parts, own, True, begin, end, stats)
    assert torch.equal(own, expected)
    assert float(stats[0]) == float(expected.min()) and float(stats[1]) == float(expected.max()) and stats[2] == 0
    headers = torch.full((minmax.compressed_size(m, 1),), 77, dtype=torch.uint8)
    reference = minmax.compress_minmax_uint8_headers(own, 1, torch.full_like(headers, 77))
    impl.headers_from_stats(stats, m, headers, "raise")
    assert torch.equal(headers, reference)


@pytest.mark.parametrize("impl", BACKENDS, ids=IDS)
def test_headers_from_stats_edge_cases(impl) -> None:  # noqa: ANN001
    cases = [torch.tensor([-0.0, 0.0, -0.0]), torch.tensor([-0.0]), torch.zeros(0), torch.full((9,), 2.5),
             torch.tensor([1.0, float("nan"), 2.0]), torch.tensor([1.0, float("inf")]), torch.full((4,), 3e38) * torch.tensor([1.0, -1, 1, -1])]
    for x in cases:
        stats = minmax.minmax_stats()
        fallback_fused.merge_stats(stats, x)
        size = minmax.compressed_size(x.numel(), 1)
        got = impl.headers_from_stats(stats, x.numel(), torch.full((size,), 77, dtype=torch.uint8), "propagate")
        expected = fallback.headers(x, 1, "propagate", torch.full((size,), 77, dtype=torch.uint8))
        assert torch.equal(got, expected), x
        representable = x.numel() == 0 or bool(torch.isfinite(x).all()) and float(x.abs().max()) < 1e30
        if not representable:
            with pytest.raises(minmax.NonFiniteError):
                impl.headers_from_stats(stats, x.numel(), got, "raise")


@pytest.mark.parametrize("impl", BACKENDS, ids=IDS)
@pytest.mark.parametrize("numel,keep", [(10001, 10001), (10001, 9000), (7, 3), (300000, 299999)])
def test_quantise_with_decompressed(impl, numel: int, keep: int) -> None:  # noqa: ANN001
    x = _values(numel, 3, 4.0)
    whole = minmax.compress_minmax_uint8(x, 1)
    expected = minmax.decompress_minmax_uint8(whole, 1, torch.empty(numel))[:keep]
    out = minmax.compress_minmax_uint8_headers(x, 1, torch.full_like(whole, 77))
    decompressed = torch.full((keep,), 5.0)
    for begin, end in _segments(numel, 2053):
        impl.quantise(x, 1, out, begin, end, decompressed)
    assert torch.equal(out, whole) and torch.equal(decompressed, expected)


def _lpd_case(numel: int, seed: int) -> tuple[torch.Tensor, ...]:
    x = _values(numel, seed)
    return x, x + _values(numel, seed + 1, 1e-2), x + _values(numel, seed + 2, 1e-2), x + _values(numel, seed + 3, 1e-2)


@pytest.mark.parametrize("impl", LPD_BACKENDS, ids=LPD_IDS)
@pytest.mark.parametrize("numel", [1, 17, 4099, 300001])
def test_lpd_difference_is_the_torch_expression(impl, numel: int) -> None:  # noqa: ANN001
    x, w, left, right = _lpd_case(numel, numel)
    expected = x + left / 3 + right / 3 - w * (5 / 3)  # the recipe of DESIGN.md, as torch evaluates it
    z, stats = torch.full_like(x, 9.0), minmax.minmax_stats()
    impl.lpd_diff(x, w, left, right, z, stats)
    assert torch.equal(z, expected)
    assert float(stats[0]) == float(expected.min()) and float(stats[1]) == float(expected.max()) and stats[2] == 0
    x[numel // 2] = float("nan")
    impl.lpd_diff(x, w, left, right, z, stats)
    assert stats[2] == 1


@pytest.mark.parametrize("impl", LPD_BACKENDS, ids=LPD_IDS)
@pytest.mark.parametrize("numel,shared", [(4099, False), (300001, True), (3, False)])
def test_lpd_update_is_three_decompressions(impl, numel: int, shared: bool) -> None:  # noqa: ANN001
    x, w, left, right = _lpd_case(numel, 7 * numel)
    q_left = minmax.compress_minmax_uint8(_values(numel, 1, 1e-2), 1)
    q_right = q_left if shared else minmax.compress_minmax_uint8(_values(numel, 2, 1e-2), 1)
    q_own = minmax.compress_minmax_uint8(_values(numel, 3, 1e-2), 1)
    expected = [t.clone() for t in (w, left, right)]
    for buf, target in zip((q_own, q_left, q_right), expected):
        minmax.decompress_minmax_uint8(buf, 1, target, accumulate=True)
    bucket = torch.full_like(x, 3.0)
    for begin, end in _segments(numel, 1031):
        impl.lpd_update(q_left, q_right, q_own, w, left, right, bucket, begin, end)
    assert torch.equal(w, expected[0]) and torch.equal(left, expected[1]) and torch.equal(right, expected[2])
    assert torch.equal(bucket, w)


def test_public_api_dispatches_and_checks() -> None:
    x, w, left, right = _lpd_case(1000, 5)
    z = lpd.lpd_difference(x, w, left, right, torch.empty_like(x))
    assert torch.equal(z, x + left / 3 + right / 3 - w * (5 / 3))
    with pytest.raises(ValueError, match="w has 999 elements"):
        lpd.lpd_difference(x, w[:999], left, right, torch.empty_like(x))
    with pytest.raises(ValueError, match="float32"):
        lpd.lpd_difference(x.double(), w, left, right, torch.empty_like(x))
    buf = minmax.compress_minmax_uint8(z, 1)
    with pytest.raises(ValueError, match="begin"):
        lpd.lpd_update(buf, buf, buf, w, left, right, begin=5, end=2)
    with pytest.raises(ValueError, match="one chunk"):
        minmax.quantise_minmax_uint8(x, 2, minmax.compress_minmax_uint8(x, 2), 0, 10, decompressed=torch.empty(10))
    with pytest.raises(ValueError, match="stats"):
        minmax.decompress_average_minmax_uint8([buf], 1, torch.empty(1000, dtype=torch.float16), stats=minmax.minmax_stats())
    stats = minmax.minmax_stats()
    own = minmax.decompress_average_minmax_uint8([buf], 1, torch.empty(1000), stats=stats)
    assert float(stats[1]) == float(own.max())
    out = minmax.minmax_uint8_headers_from_stats(stats, 1000, torch.empty_like(buf))
    assert torch.equal(out[:8], minmax.compress_minmax_uint8(own, 1)[:8])


@pytest.mark.skipif(native.backend != "native", reason="the C kernels are not built")
def test_threads_give_the_same_bits() -> None:
    numel = 600_001
    x, w, left, right = _lpd_case(numel, 11)
    single = lpd_cpu.lpd_diff(x, w, left, right, torch.empty_like(x), minmax.minmax_stats())
    bufs = minmax.compress_minmax_uint8(torch.cat([x, w]), 2)
    own1, stats1 = torch.empty(numel), minmax.minmax_stats()
    minmax.decompress_average_minmax_uint8(bufs, 2, own1, stats=stats1)
    previous = minmax.cpu.get_threads()
    try:
        minmax.cpu.set_threads(3)
        stats = minmax.minmax_stats()
        assert torch.equal(lpd_cpu.lpd_diff(x, w, left, right, torch.empty_like(x), stats), single)
        assert float(stats[0]) == float(single.min()) and float(stats[1]) == float(single.max())
        own3, stats3 = torch.empty(numel), minmax.minmax_stats()
        minmax.decompress_average_minmax_uint8(bufs, 2, own3, stats=stats3)
        assert torch.equal(own1, own3) and torch.equal(stats1, stats3)
        buf = minmax.compress_minmax_uint8(own3, 1)
        decompressed = torch.empty(numel)
        out = minmax.compress_minmax_uint8_headers(own3, 1, torch.empty_like(buf))
        minmax.quantise_minmax_uint8(own3, 1, out, 0, numel, decompressed=decompressed)
        assert torch.equal(out, buf)
        assert torch.equal(decompressed, minmax.decompress_minmax_uint8(buf, 1, torch.empty(numel)))
    finally:
        minmax.cpu.set_threads(previous)


@pytest.mark.parametrize("numel", [1, 1001, 300_001])
def test_adam_update_is_torchs_arithmetic_with_a_correct_sqrt(numel: int) -> None:
    p, m = _values(numel, 1), _values(numel, 2, 1e-2)
    v = _values(numel, 3, 1e-2) ** 2
    v[0] = 0.0
    step, c, eps = -1e-3 / (1 - 0.9**7), (1 - 0.999**7) ** 0.5, 1e-8
    expected = p.addcdiv(m, (v.double().sqrt().float() / c).add_(eps), value=step)
    param = torch.nn.Parameter(p.clone())
    version = param._version
    with torch.no_grad():
        qadam_kernels.adam_update(param, m, v, step, c, eps)
    assert torch.equal(param.detach(), expected) and param._version > version
    other = p.clone()
    qadam_kernels.reference_adam_update(other, m, v, step, c, eps)
    assert torch.equal(other, expected)
    half, m_half, v_half = p.half(), m.half(), v.half()
    in_fp32 = half.float()
    qadam_kernels.adam_update(in_fp32, m_half.float(), v_half.float(), step, c, eps)
    qadam_kernels.adam_update(half, m_half, v_half, step, c, eps)  # not fp32: computed in fp32, rounded once
    assert torch.equal(half, in_fp32.half())
