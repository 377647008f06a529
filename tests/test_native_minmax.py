"""MinMaxUInt8 kernels: the formula per chunk (numpy reference), native == fallback, layout, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bagua_codecs import minmax_kernels as minmax
from bagua_codecs.minmax_kernels import fallback, layout

try:
    from bagua_codecs.minmax_kernels import cpu
except ImportError:  # pragma: no cover - only where the extension was not built
    cpu = None

IMPLS = [pytest.param(fallback, id="fallback")]
if cpu is not None:
    IMPLS.append(pytest.param(cpu, id="native"))
needs_native = pytest.mark.skipif(cpu is None, reason="bagua_core._native_cpu is not built")
F32 = np.float32


def reference_compress(x: torch.Tensor, n_chunks: int) -> bytes:
    """The DESIGN.md formula, chunk by chunk, in numpy fp32 (independent of the code under test)."""
    values = x.float().numpy().astype(F32)
    m = -(-values.size // n_chunks) if values.size else 0
    slot = 8 + -(-m // 8) * 8
    out = bytearray(n_chunks * slot)
    for c in range(n_chunks):
        chunk = values[c * m : (c + 1) * m]
        mn = F32(chunk.min()) + F32(0) if chunk.size else F32(0)
        mx = F32(chunk.max()) + F32(0) if chunk.size else F32(0)
        scale = F32(255) / ((mx - mn) + F32(1e-7))
        upper = np.rint(mx * scale)
        lower = upper - F32(255)
        q = np.clip(np.minimum(np.rint(chunk * scale), upper) - lower, 0, 255).astype(np.uint8)
        out[c * slot : c * slot + 8] = np.array([mn, mx], dtype=F32).tobytes()
        out[c * slot + 8 : c * slot + 8 + chunk.size] = q.tobytes()
    return bytes(out)


def reference_decompress(buf: bytes, numel: int, n_chunks: int) -> np.ndarray:
    m = -(-numel // n_chunks) if numel else 0
    slot = 8 + -(-m // 8) * 8
    parts = []
    for c in range(n_chunks):
        length = max(0, min(m, numel - c * m))
        mn, mx = np.frombuffer(buf[c * slot : c * slot + 8], dtype=F32)
        scale = F32(255) / ((mx - mn) + F32(1e-7))
        lower = np.rint(mx * scale) - F32(255)
        q = np.frombuffer(buf[c * slot + 8 : c * slot + 8 + length], dtype=np.uint8).astype(F32)
        parts.append((q + lower) / scale)
    return np.concatenate(parts) if parts else np.zeros(0, F32)


def _inputs() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        ("random", torch.randn(1000, generator=g) * 3),
        ("constant", torch.full((77,), 0.25)),
        ("zeros", torch.zeros(40)),
        ("negative_zero", torch.tensor([-0.0, 0.0, -0.0] * 7)),
        ("tiny", torch.tensor([1.5])),
        ("odd_size", torch.rand(1237, generator=g) * 1e-3 + 5),
        ("large_range", torch.randn(300, generator=g) * 1e20),
        ("ties", torch.arange(-64, 64, dtype=torch.float32) / 2),
        ("empty", torch.zeros(0)),
    ]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n_chunks", [1, 3, 8])
@pytest.mark.parametrize("name,x", _inputs(), ids=[name for name, _ in _inputs()])
def test_round_trip_matches_the_formula(impl, n_chunks: int, name: str, x: torch.Tensor) -> None:
    buf = impl.compress(x, n_chunks, "raise")
    assert buf.dtype == torch.uint8 and buf.numel() == minmax.compressed_size(x.numel(), n_chunks)
    assert bytes(buf.numpy()) == reference_compress(x, n_chunks)
    out = impl.decompress(buf, n_chunks, torch.empty(x.numel()), accumulate=False)
    np.testing.assert_array_equal(out.numpy(), reference_decompress(bytes(buf.numpy()), x.numel(), n_chunks))
    if x.numel() and name != "large_range":
        m = -(-x.numel() // n_chunks)
        for c in range(n_chunks):  # error bound: one quantisation step of the chunk's range
            chunk, approx = x[c * m : (c + 1) * m], out[c * m : (c + 1) * m]
            if chunk.numel():
                step = float(chunk.max() - chunk.min()) / 255 + 1e-6
                assert float((chunk - approx).abs().max()) <= step * 1.01 + 1e-6 * float(chunk.abs().max())


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("numel,n_chunks", [(1, 1), (17, 4), (1000, 7), (4096, 2), (5, 8), (70001, 3)])
def test_native_is_bit_identical_to_fallback(dtype: torch.dtype, numel: int, n_chunks: int) -> None:
    x = (torch.randn(numel, generator=torch.Generator().manual_seed(numel)) * 2 + 0.5).to(dtype)
    a, b = cpu.compress(x, n_chunks, "raise"), fallback.compress(x, n_chunks, "raise")
    assert torch.equal(a, b)
    assert bytes(a.numpy()) == reference_compress(x, n_chunks)
    for accumulate in (False, True):
        base = torch.randn(numel, generator=torch.Generator().manual_seed(1)).to(dtype)
        oa, ob = base.clone(), base.clone()
        cpu.decompress(a, n_chunks, oa, accumulate)
        fallback.decompress(a, n_chunks, ob, accumulate)
        assert oa.dtype == dtype and torch.equal(oa, ob)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_accumulate_adds_in_fp32(dtype: torch.dtype) -> None:
    x = torch.linspace(-2, 3, 101)
    buf = minmax.compress_minmax_uint8(x)
    base = torch.full((101,), 0.5, dtype=dtype)
    expected = (base.float() + minmax.decompress_minmax_uint8(buf, 1, torch.empty(101))).to(dtype)
    assert torch.equal(minmax.decompress_minmax_uint8(buf, 1, base, accumulate=True), expected)


def test_layout_slots_are_one_chunk_buffers() -> None:
    assert minmax.compressed_size(10, 3) == 48 and minmax.compressed_size(0, 2) == 16
    assert layout.slot_bytes(10, 3) == 16 and layout.chunk_numel(10, 3) == 4
    x = torch.randn(4 * 24)
    buf = minmax.compress_minmax_uint8(x, 4)
    slot = minmax.compressed_size(24, 1)
    for j in range(4):
        assert torch.equal(
            buf[j * slot : (j + 1) * slot], minmax.compress_minmax_uint8(x[j * 24 : (j + 1) * 24])
        )
    short = minmax.compress_minmax_uint8(torch.ones(10), 3)  # chunks 4, 4, 2: padding bytes are zero
    assert short[12:16].tolist() == short[28:32].tolist() == [0] * 4 and short[42:].tolist() == [0] * 6


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decompress_average(impl, average: bool, dtype: torch.dtype) -> None:
    n, m = 5, 333
    x = torch.randn(n * m, generator=torch.Generator().manual_seed(3))
    stacked = minmax.compress_minmax_uint8(x, n)
    size = minmax.compressed_size(m, 1)
    parts = list(stacked.view(n, size).unbind(0))
    acc = np.zeros(m, F32)
    for k in range(n):
        acc = acc + reference_decompress(bytes(parts[k].numpy()), m, 1)
    expected = torch.from_numpy(acc / F32(n) if average else acc).to(dtype)
    got = impl.decompress_sum(parts, torch.empty(m, dtype=dtype), average)
    assert torch.equal(got, expected)
    via_api = minmax.decompress_average_minmax_uint8(stacked, n, torch.empty(m, dtype=dtype), average=average)
    assert torch.equal(via_api, expected)
    assert torch.equal(
        minmax.decompress_average_minmax_uint8(parts, n, torch.empty(m, dtype=dtype), average), expected
    )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nonfinite_raises_or_propagates(impl, bad: float) -> None:
    x = torch.randn(40)
    x[25] = bad  # chunk 2 of 4
    with pytest.raises(minmax.NonFiniteError, match="NaN/Inf"):
        impl.compress(x, 4, "raise")
    buf = impl.compress(x, 4, "propagate")
    assert torch.equal(buf, fallback.compress(x, 4, "propagate"))
    slot = minmax.compressed_size(10, 1)
    assert buf[2 * slot : 2 * slot + 8].view(torch.float32).isnan().all()
    assert buf[2 * slot + 8 : 3 * slot].eq(0).all()
    out = impl.decompress(buf, 4, torch.empty(40), False)
    assert out[20:30].isnan().all() and out[:20].isfinite().all() and out[30:].isfinite().all()
    assert torch.equal(
        out[:20], minmax.decompress_minmax_uint8(minmax.compress_minmax_uint8(x[:20], 2), 2, torch.empty(20))
    )


@pytest.mark.parametrize("impl", IMPLS)
def test_overflowing_values_are_rejected(impl) -> None:
    x = torch.full((16,), 1e30)  # range 0: scale = 255 / 1e-7 and x * scale overflows fp32
    with pytest.raises(minmax.NonFiniteError, match="overflow"):
        impl.compress(x, 1, "raise")
    assert impl.compress(x, 1, "propagate")[:8].view(torch.float32).isnan().all()


def test_argument_errors_are_python_exceptions() -> None:
    x = torch.randn(10)
    with pytest.raises(ValueError, match="contiguous"):
        minmax.compress_minmax_uint8(torch.randn(4, 4).t())
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        minmax.compress_minmax_uint8(torch.arange(4))
    with pytest.raises(TypeError, match="torch.Tensor"):
        minmax.compress_minmax_uint8([1.0, 2.0])  # type: ignore[arg-type]
    for n_chunks in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="n_chunks"):
            minmax.compress_minmax_uint8(x, n_chunks)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nonfinite"):
        minmax.compress_minmax_uint8(x, nonfinite="ignore")
    buf = minmax.compress_minmax_uint8(x, 2)
    with pytest.raises(ValueError, match="compressed_size"):
        minmax.decompress_minmax_uint8(buf, 3, torch.empty(10))
    with pytest.raises(ValueError, match="compressed_size"):
        minmax.decompress_minmax_uint8(buf[:-1], 2, torch.empty(10))
    with pytest.raises(TypeError, match="uint8"):
        minmax.decompress_minmax_uint8(buf.float(), 2, torch.empty(10))
    with pytest.raises(ValueError, match="contiguous"):
        minmax.decompress_minmax_uint8(buf, 2, torch.empty(20)[::2])
    with pytest.raises(TypeError, match="float32"):
        minmax.decompress_minmax_uint8(buf, 2, torch.empty(10, dtype=torch.float64))
    with pytest.raises(ValueError, match="compressed_size"):
        minmax.compress_minmax_uint8(x, 2, out=torch.empty(5, dtype=torch.uint8))
    one = minmax.compress_minmax_uint8(x)
    with pytest.raises(ValueError, match="got 1 buffers but n = 2"):
        minmax.decompress_average_minmax_uint8([one], 2, torch.empty(10))
    with pytest.raises(ValueError, match="n must be a positive integer"):
        minmax.decompress_average_minmax_uint8([one], 0, torch.empty(10))


@needs_native
def test_c_entry_points_check_sizes_too() -> None:
    lib = cpu.lib
    x, buf = torch.randn(8), torch.empty(16, dtype=torch.uint8)
    assert (
        lib.bagua_minmax_compress_f32(cpu._float_ptr(x), 8, 1, cpu._byte_ptr(buf), 15, 1)
        == lib.BAGUA_MINMAX_ERR_SIZE
    )
    assert (
        lib.bagua_minmax_compress_f32(cpu.ffi.NULL, 8, 1, cpu._byte_ptr(buf), 16, 1)
        == lib.BAGUA_MINMAX_ERR_ARGUMENT
    )
    assert lib.bagua_minmax_compressed_size(8, 0) == -1


@needs_native
def test_threads_give_identical_results() -> None:
    x = torch.randn((1 << 18) + 123, generator=torch.Generator().manual_seed(5))
    before = cpu.get_threads()
    try:
        cpu.set_threads(1)
        one = cpu.compress(x, 3, "raise")
        cpu.set_threads(2)
        assert cpu.get_threads() == 2
        assert torch.equal(cpu.compress(x, 3, "raise"), one)
        a = cpu.decompress(one, 3, torch.empty_like(x), False)
        cpu.set_threads(1)
        assert torch.equal(a, cpu.decompress(one, 3, torch.empty_like(x), False))
        with pytest.raises(ValueError, match="1..64"):
            cpu.set_threads(0)
    finally:
        cpu.set_threads(before)
