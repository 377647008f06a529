"""Every installed codec keeps the shared layout (slots, segments, ranges) and its own error bound;
MinMaxUInt8 is byte for byte the native kernels."""

from __future__ import annotations

import pytest
import torch

from bagua_codecs import minmax_kernels as minmax
from bagua_core.codecs import get_codec
from bagua_core.runtime.native.checks import NonFiniteError

BUILTINS = ["MinMaxUInt8", "MinMaxUInt4", "fp16", "bf16", "ScaledSign"]
SHAPES = [(1, 1), (7, 1), (1000, 1), (1001, 3), (64, 4), (5, 8), (4099, 2)]


def _x(numel: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(numel, generator=torch.Generator().manual_seed(seed)) * 3


def _error_bound(name: str, chunk: torch.Tensor) -> float:
    span = float(chunk.max() - chunk.min())
    return {"MinMaxUInt8": span / 255 * 0.51 + 1e-6, "MinMaxUInt4": span / 15 * 0.51 + 1e-6,
            "fp16": float(chunk.abs().max()) * 2**-11, "bf16": float(chunk.abs().max()) * 2**-8}[name]


@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("numel, n_chunks", SHAPES)
def test_roundtrip_error_and_size(name: str, numel: int, n_chunks: int) -> None:
    codec = get_codec(name)
    x = _x(numel)
    buf = codec.encode(x, n_chunks)
    assert buf.dtype == torch.uint8 and buf.numel() == codec.encoded_size(numel, n_chunks)
    assert codec.encoded_size(numel, n_chunks) % (8 * n_chunks) == 0
    out = codec.decode(buf, n_chunks, torch.empty(numel))
    m = codec.chunk_numel(numel, n_chunks)
    for j in range(0, numel, m):
        chunk, got = x[j : j + m], out[j : j + m]
        if name == "ScaledSign":  # signs and the mean absolute value are kept
            assert torch.equal(got >= 0, chunk >= 0)
            assert torch.allclose(got.abs(), chunk.abs().mean().expand_as(got), rtol=1e-6)
        else:
            assert float((got - chunk).abs().max()) <= _error_bound(name, chunk)


@pytest.mark.parametrize("name", BUILTINS)
def test_slot_j_is_the_encoding_of_chunk_j(name: str) -> None:
    codec = get_codec(name)
    x = _x(4 * 250, seed=1)
    slots = codec.encode(x, 4).view(4, -1)
    for j in range(4):
        assert torch.equal(slots[j], codec.encode(x[j * 250 : (j + 1) * 250], 1))


@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("numel, n_chunks", [(1001, 3), (4099, 2), (5, 8)])
def test_segments_give_the_same_bytes_and_values(name: str, numel: int, n_chunks: int) -> None:
    codec = get_codec(name)
    x = _x(numel, seed=2)
    whole = codec.encode(x, n_chunks)
    m = codec.chunk_numel(numel, n_chunks)
    step = 8 * codec.segment_alignment
    bounds = list(range(0, m, step)) + [m]
    buf = torch.full_like(whole, 0xAB)
    codec.encode_headers(x, n_chunks, buf)
    covered = []
    for begin, end in zip(bounds, bounds[1:]):
        codec.encode_range(x, n_chunks, buf, begin, end)
        covered.append(codec.segment_bytes(numel, n_chunks, begin, end))
    assert torch.equal(buf, whole)
    assert covered[0][0] == 0 and covered[-1][1] == codec.slot_bytes(numel, n_chunks)
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))  # the segments partition a slot
    full = codec.decode(whole, n_chunks, torch.empty(numel))
    pieced = torch.full((numel,), float("nan"))
    for begin, end in zip(bounds, bounds[1:]):
        codec.decode(whole, n_chunks, pieced, begin=begin, end=end)
    assert torch.equal(pieced, full)


@pytest.mark.parametrize("name", BUILTINS)
def test_decode_accumulates_and_averages_in_fp32(name: str) -> None:
    codec = get_codec(name)
    xs = [_x(300, seed=s) for s in range(3)]
    bufs = [codec.encode(x) for x in xs]
    decoded = [codec.decode(b, 1, torch.empty(300)) for b in bufs]
    base = _x(300, seed=9)
    assert torch.equal(codec.decode(bufs[0], 1, base.clone(), accumulate=True), base + decoded[0])
    expected = (decoded[0] + decoded[1] + decoded[2]) / 3
    assert torch.equal(codec.decode_average(bufs, 3, torch.empty(300)), expected)
    assert torch.equal(codec.decode_average(torch.cat(bufs), 3, torch.empty(300)), expected)
    half = codec.decode_average(bufs, 3, torch.empty(300, dtype=torch.bfloat16), average=False)
    assert torch.equal(half, (decoded[0] + decoded[1] + decoded[2]).bfloat16())
    part = torch.zeros(300)
    codec.decode_average(bufs, 3, part, begin=16, end=48)
    assert torch.equal(part[16:48], expected[16:48]) and not part[:16].any() and not part[48:].any()


@pytest.mark.parametrize("name", BUILTINS)
def test_fp16_and_bf16_inputs(name: str) -> None:
    codec = get_codec(name)
    x = _x(257, seed=3).to(torch.bfloat16)
    assert torch.equal(codec.encode(x, 2), codec.encode(x.float(), 2))


@pytest.mark.parametrize("numel, n_chunks", SHAPES + [(0, 1), (3, 5), (1 << 16, 7)])
def test_minmax_uint8_is_the_native_kernels_byte_for_byte(numel: int, n_chunks: int) -> None:
    codec = get_codec("MinMaxUInt8")
    x = _x(numel, seed=4)
    assert torch.equal(codec.encode(x, n_chunks), minmax.compress_minmax_uint8(x, n_chunks))
    buf = minmax.compress_minmax_uint8(x, n_chunks)
    assert torch.equal(codec.decode(buf, n_chunks, torch.empty(numel)),
                       minmax.decompress_minmax_uint8(buf, n_chunks, torch.empty(numel)))


@pytest.mark.parametrize("name", BUILTINS)
def test_non_finite_chunks_decode_to_nan_or_raise(name: str) -> None:
    codec = get_codec(name)
    x = _x(40, seed=5)
    x[25] = float("inf")
    out = codec.decode(codec.encode(x, 4), 4, torch.empty(40))
    if name in ("fp16", "bf16"):  # carried as itself
        assert out[25] == float("inf") and torch.isfinite(out[:25]).all() and torch.isfinite(out[26:]).all()
    else:  # the whole chunk that held the inf
        assert torch.isnan(out[20:30]).all()
        assert torch.isfinite(out[:20]).all() and torch.isfinite(out[30:]).all()
    with pytest.raises(NonFiniteError, match="chunk"):
        codec.encode(x, 4, nonfinite="raise")


def test_empty_chunks_and_bad_arguments() -> None:
    codec = get_codec("MinMaxUInt4")
    buf = codec.encode(torch.arange(3.0), 5)  # chunks of 1 value; two empty slots
    assert not buf.view(5, -1)[3:].any()
    assert torch.equal(codec.decode(buf, 5, torch.empty(3)), torch.arange(3.0))
    with pytest.raises(ValueError, match="bytes but codec 'MinMaxUInt4' encodes"):
        codec.decode(buf[:-8], 5, torch.empty(3))
    with pytest.raises(ValueError, match="begin must be a multiple of 2"):
        codec.encode_range(torch.arange(8.0), 1, codec.encode(torch.arange(8.0)), 1, 4)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        codec.encode(torch.arange(4))
