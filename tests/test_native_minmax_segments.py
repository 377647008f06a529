"""Segment-wise MinMaxUInt8 (headers, then quantise/decompress chunk-local ranges) gives exactly the
bytes and values of the whole-chunk functions, native and fallback alike."""

from __future__ import annotations

import pytest
import torch

from bagua_codecs import minmax_kernels as minmax
from bagua_codecs.minmax_kernels import fallback
from bagua_codecs.minmax_kernels.layout import chunk_numel
from bagua_core.runtime import native

BACKENDS = [fallback] + ([minmax.cpu] if native.backend == "native" else [])  # type: ignore[attr-defined]


def _inputs() -> list[tuple[torch.Tensor, int]]:
    gen = torch.Generator().manual_seed(0)
    cases = [(torch.randn(1000, generator=gen), 3), (torch.randn(5, generator=gen), 4),
             (torch.randn(70001, generator=gen) * 50, 2), (torch.randn(300000, generator=gen), 2)]
    with_nan = torch.randn(999, generator=gen)
    with_nan[400] = float("nan")  # chunk 1 of 3 is a NaN chunk (nonfinite="propagate")
    cases.append((with_nan, 3))
    return cases


def _splits(m: int) -> list[tuple[int, int]]:
    """Uneven chunk-local ranges that cover [0, m), and one past the end (clamped to the chunk)."""
    bounds = sorted({0, m, min(1, m), m // 3, min(m, m // 2 + 5), max(0, m - 7)})
    return list(zip(bounds, bounds[1:])) + [(m, m + 9)]


@pytest.mark.parametrize("impl", BACKENDS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_segments_equal_whole_chunks(impl) -> None:  # noqa: ANN001
    for x, n in _inputs():
        whole = minmax.compress_minmax_uint8(x, n, nonfinite="propagate")
        m = chunk_numel(x.numel(), n)
        out = torch.full_like(whole, 77)  # garbage: every byte must be written
        impl.headers(x, n, "propagate", out)
        for begin, end in reversed(_splits(m)):
            impl.quantise(x, n, out, begin, end)
        assert torch.equal(out, whole), (x.numel(), n)
        expected = minmax.decompress_minmax_uint8(whole, n, torch.empty_like(x))
        got = torch.full_like(x, 3.0)
        for begin, end in _splits(m):
            impl.decompress(whole, n, got, False, begin, end)
        assert torch.equal(got.isnan(), expected.isnan())
        assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(expected))
        acc = torch.ones_like(x)
        for begin, end in _splits(m):
            impl.decompress(whole, n, acc, True, begin, end)
        assert torch.equal(torch.nan_to_num(acc), torch.nan_to_num(minmax.decompress_minmax_uint8(
            whole, n, torch.ones_like(x), accumulate=True)))
        if x.numel() % n == 0:  # the slots of one buffer as the n inputs of an average
            parts = list(whole.view(n, -1).unbind(0))
            mean = minmax.decompress_average_minmax_uint8(whole, n, torch.empty(m))
            got = torch.zeros(m)
            for begin, end in _splits(m):
                impl.decompress_sum(parts, got, True, begin, end)
            assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(mean))


def test_public_api_checks_ranges() -> None:
    x = torch.randn(10)
    buf = minmax.compress_minmax_uint8(x, 2)
    with pytest.raises(ValueError, match="begin must be"):
        minmax.quantise_minmax_uint8(x, 2, buf, -1, 3)
    with pytest.raises(ValueError, match="end must be"):
        minmax.decompress_minmax_uint8(buf, 2, torch.empty(10), begin=4, end=2)
    minmax.compress_minmax_uint8_headers(x, 2, buf)
    minmax.quantise_minmax_uint8(x, 2, buf, 0, 5)
    assert torch.equal(buf, minmax.compress_minmax_uint8(x, 2))
