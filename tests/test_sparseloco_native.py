"""sparseloco's native kernels (``bagua_algorithms.sparseloco.kernels``) give the torch path's bits: each kernel
(the top-k with the accumulator's update, the quantiser and its packing, the Elias-Fano index field, the message,
its decoding and the average of n) against the torch code it replaces, for every ``bits`` (32 included), chunk
sizes, topk, tensors whose numel is no multiple of the chunk, chunks sending every entry, tiny tensors, several
tensors per fragment, ties, NaN, infinities, signed zeros, and chunks whose sampled threshold misses (the
selection's fallback); garbage bytes decode inside their chunks and to the torch path's values; the round's
fused forms (the outer gradient taken in the encoding, the average as its entries and the outer step on them) give
the unfused bits; threads change no bit; the round's exchange gives diloco's bits; ``BAGUA_NATIVE=python`` serves the torch path. The CUDA
kernels against the C kernels are the ``gpu`` tests at the end."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
import torch

from bagua_algorithms.diloco import FragmentExchange
from bagua_algorithms.sparseloco.codec import ChunkTopK, _from_two_bytes, _two_bytes
from bagua_algorithms.sparseloco.quantiser import dequantise, pack, quantise, unpack
from bagua_core.kernels import get_threads, set_threads

try:
    from bagua_algorithms.sparseloco.kernels import cpu
except ImportError:
    cpu = None

native = pytest.mark.skipif(cpu is None, reason="the C kernels are not built")

LAYOUTS = [
    ([5000, 10, 0, 4096, 300], 4096, 64),  # a short last chunk, an empty and a tiny tensor
    ([1, 2, 3, 700], 64, 5),  # tiny tensors
    ([999], 1000, 1000),  # k' = m: a chunk longer than its tensor
    ([130, 7], 8, 8),  # k' = m in every chunk
    ([20000, 9000, 4097], 4096, 64),  # sampled chunks, a 1-element last chunk
    ([70000, 65537], 65536, 1),  # the largest chunk, l = 16
    ([3000, 2500], 2048, 2048),  # topk = chunk_size
    ([50000], 1024, 64),  # sampled at the bound, 16 k = m
    ([12345, 678], 300, 299),  # k' = m - 1, l = 0
    ([40000], 4096, 256),  # many entries a chunk
]
KINDS = ["ties", "normal", "special", "zeros", "equal", "sampled"]


def _values(kind: str, numel: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "ties":
        return torch.randint(-6, 7, (numel,), generator=g).float() / 4
    x = torch.randn(numel, generator=g)
    if kind == "special":
        x[torch.randint(0, max(numel, 1), (max(numel // 50, 1),), generator=g)] = 0.0
        for at, v in ((3, float("nan")), (7, float("inf")), (9, -0.0), (11, float("-inf")), (4500, float("nan"))):
            if at < numel:
                x[at] = v
    elif kind == "zeros":
        x.zero_()
    elif kind == "equal":
        x.fill_(-0.75)
    elif kind == "sampled":  # large values exactly where the selection samples: its guessed threshold misses
        x *= 1e-3
        x[::16] = 100 + torch.rand(x[::16].shape, generator=g)
    return x


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (fp32 as int32, so -0 is not 0), NaN where NaN (its payload aside)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype != torch.float32:
        return torch.equal(a, b)
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a.view(torch.int32)[~nan], b.view(torch.int32)[~nan])


def _codecs(numels: list[int], chunk_size: int, topk: int, bits: int) -> tuple[ChunkTopK, ChunkTopK]:
    """(native, torch) codecs of one layout."""
    return ChunkTopK(numels, chunk_size, topk, bits), ChunkTopK(numels, chunk_size, topk, bits, native=False)


@native
@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_the_selection_is_chunk_layouts_with_the_accumulators_update(layout: int) -> None:
    numels, chunk_size, topk = LAYOUTS[layout]
    codec, _ = _codecs(numels, chunk_size, topk, 2)
    kernels = cpu.CpuLayout(codec.layout)
    for seed, kind in enumerate(KINDS):
        x = _values(kind, codec.layout.numel, seed)
        columns, top = codec.layout.select(x)
        got_columns, largest, smallest = cpu.select(kernels, x.clone())
        assert torch.equal(got_columns, columns), (layout, kind)
        assert same_bits(largest, top[:, 0].contiguous()) and same_bits(smallest, codec.layout.smallest_sent(top))
        delta = _values("normal", x.numel(), seed + 100)
        for beta in (0.95, 1.0, 0.0):
            e, expected = x.clone(), x.clone()
            if beta != 1.0:
                expected.mul_(beta)
            expected.add_(delta)
            got_columns, largest, _ = cpu.select(kernels, e, delta, beta)
            assert same_bits(e, expected), (layout, kind, beta)
            columns, top = codec.layout.select(expected)
            assert torch.equal(got_columns, columns) and same_bits(largest, top[:, 0].contiguous())


@native
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_the_quantiser_and_its_packing_are_quantiser_pys(bits: int) -> None:
    for layout, (numels, chunk_size, topk) in enumerate(LAYOUTS):
        codec, _ = _codecs(numels, chunk_size, topk, bits)
        layout_ = codec.layout
        kernels = cpu.CpuLayout(layout_)
        for seed, kind in enumerate(KINDS):
            x = _values(kind, layout_.numel, seed)
            columns, top = layout_.select(x)
            values = x[layout_.entry_base + columns]
            largest = top[:, 0].clone(memory_format=torch.contiguous_format)
            smallest = layout_.smallest_sent(top).clone(memory_format=torch.contiguous_format)
            hi, q, codes = quantise(values, layout_.entry_chunk, largest, smallest, bits)
            header, packed = cpu.quantise(kernels, values, largest, smallest, bits)
            assert torch.equal(header, torch.cat([hi.view(torch.uint8), _two_bytes(q)])), (layout, kind)
            assert torch.equal(packed, pack(codes, bits)), (layout, kind)
        g = torch.Generator().manual_seed(layout)
        for _ in range(5):  # any bytes
            header = torch.randint(0, 256, (6 * layout_.chunk_count,), generator=g, dtype=torch.uint8)
            packed = torch.randint(0, 256, (-(-layout_.entry_count * bits // 8),), generator=g, dtype=torch.uint8)
            hi = header[: 4 * layout_.chunk_count].view(torch.float32)
            q = _from_two_bytes(header[4 * layout_.chunk_count :])
            expected = dequantise(unpack(packed, layout_.entry_count, bits), layout_.entry_chunk, hi, q, bits)
            assert same_bits(cpu.dequantise(kernels, header, packed, bits), expected), layout


@native
@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_the_index_field_is_codec_pys_elias_fano_field(layout: int) -> None:
    numels, chunk_size, topk = LAYOUTS[layout]
    codec, _ = _codecs(numels, chunk_size, topk, 32)
    field = codec._index  # the torch field of this layout
    kernels = cpu.CpuLayout(codec.layout)
    for seed, kind in enumerate(KINDS):
        columns, _ = codec.layout.select(_values(kind, codec.layout.numel, seed))
        encoded = cpu.index_encode(kernels, columns, field.nbytes)
        assert torch.equal(encoded, field.encode(columns)), (layout, kind)
        assert torch.equal(cpu.index_decode(kernels, encoded), columns)
    g = torch.Generator().manual_seed(layout)
    for fill in [0, 255] + [None] * 10:  # any bytes: columns inside their chunks, as the torch field reads them
        garbage = torch.randint(0, 256, (field.nbytes,), generator=g, dtype=torch.uint8) if fill is None else \
            torch.full((field.nbytes,), fill, dtype=torch.uint8)
        got = cpu.index_decode(kernels, garbage)
        assert torch.equal(got, field.decode(garbage)), (layout, fill)
        assert bool(((got >= 0) & (got <= codec.layout.entry_last)).all())


@native
def test_unsorted_columns_are_refused_with_what_to_do() -> None:
    codec, _ = _codecs([100], 50, 5, 2)
    kernels = cpu.CpuLayout(codec.layout)
    columns = torch.tensor([4, 3, 10, 11, 12, 0, 1, 2, 3, 49])
    with pytest.raises(ValueError, match="must ascend inside it"):
        cpu.index_encode(kernels, columns, codec._index.nbytes)
    with pytest.raises(ValueError, match="does not match the layout"):
        cpu.index_decode(kernels, torch.zeros(codec._index.nbytes + 1, dtype=torch.uint8))


@native
@pytest.mark.parametrize("bits", [2, 4, 8, 32])
def test_messages_and_their_decoding_are_the_torch_paths(bits: int) -> None:
    for layout, (numels, chunk_size, topk) in enumerate(LAYOUTS):
        codec, torch_codec = _codecs(numels, chunk_size, topk, bits)
        assert codec._native.serving(torch.zeros(1)) is not None and torch_codec._native.serving(torch.zeros(1)) is None
        assert cpu.CpuLayout(codec.layout).message_bytes(bits) == codec.nbytes
        messages = []
        for seed, kind in enumerate(KINDS):
            x = _values(kind, codec.layout.numel, seed)
            message = codec.encode(x)
            assert torch.equal(message, torch_codec.encode(x)), (layout, bits, kind)
            positions, values = codec.entries(message)
            expected_positions, expected_values = torch_codec.entries(message)
            assert torch.equal(positions, expected_positions) and same_bits(values, expected_values)
            decoded = codec.decode(message, 1, torch.full_like(x, 7.0))
            assert same_bits(decoded, torch_codec.decode(message, 1, torch.full_like(x, 7.0))), (layout, bits, kind)
            messages.append(message)
        for n in (1, 2, 3, len(messages)):
            bufs = torch.cat(messages[:n])
            average = codec.decode_average(bufs, n, torch.empty(codec.layout.numel))
            assert same_bits(average, torch_codec.decode_average(bufs, n, torch.empty(codec.layout.numel))), (layout, n)


@native
@pytest.mark.parametrize("bits", [2, 4, 8, 32])
def test_any_bytes_decode_inside_their_chunks_as_the_torch_path_decodes_them(bits: int) -> None:
    for layout, (numels, chunk_size, topk) in enumerate(LAYOUTS):
        codec, torch_codec = _codecs(numels, chunk_size, topk, bits)
        layout_ = codec.layout
        g = torch.Generator().manual_seed(layout)
        garbage = [torch.full((codec.nbytes,), fill, dtype=torch.uint8) for fill in (0, 255)]
        garbage += [torch.randint(0, 256, (codec.nbytes,), generator=g, dtype=torch.uint8) for _ in range(6)]
        for buf in garbage:
            positions, values = codec.entries(buf)
            expected_positions, expected_values = torch_codec.entries(buf)
            assert torch.equal(positions, expected_positions) and same_bits(values, expected_values), (layout, bits)
            assert bool(((positions >= layout_.entry_base) & (positions <= layout_.entry_base + layout_.entry_last)).all())
            out, expected = torch.empty(layout_.numel), torch.empty(layout_.numel)
            assert same_bits(codec.decode(buf, 1, out), torch_codec.decode(buf, 1, expected)), (layout, bits)
        bufs = torch.cat(garbage)
        average = codec.decode_average(bufs, len(garbage), torch.empty(layout_.numel))
        expected = torch_codec.decode_average(bufs, len(garbage), torch.empty(layout_.numel))
        assert same_bits(average, expected), (layout, bits)


@native
@pytest.mark.parametrize("bits", [2, 8, 32])
def test_encode_residual_is_the_exchanges_arithmetic(bits: int) -> None:
    """``residual = beta * residual + delta``, its message, ``residual -= decode(message)``: native in one call,
    the torch path as diloco's exchange composes it."""
    for layout, (numels, chunk_size, topk) in enumerate(LAYOUTS[:6]):
        codec, torch_codec = _codecs(numels, chunk_size, topk, bits)
        for beta in (0.95, 1.0, 0.0):
            residual = _values("special", codec.layout.numel, layout)
            expected = residual.clone()
            for round_ in range(3):
                delta = _values("ties" if round_ == 1 else "normal", codec.layout.numel, 10 * layout + round_)
                message = codec.encode_residual(residual, delta, beta)
                assert torch.equal(message, torch_codec.encode_residual(expected, delta, beta)), (layout, beta)
                assert same_bits(residual, expected), (layout, beta, round_)


@native
@pytest.mark.parametrize("bits", [2, 4, 8, 32])
def test_encode_difference_is_the_subtraction_then_encode_residual(bits: int) -> None:
    """``encode_difference(residual, start, params)`` (the outer gradient taken in the encoding pass) against
    ``torch.sub`` of each tensor into a flat delta and the torch path's ``encode_residual``: message and residual,
    bit for bit; the same with the C kernels off (the torch path computes the delta into the scratch)."""
    for layout, (numels, chunk_size, topk) in enumerate(LAYOUTS):
        codec, torch_codec = _codecs(numels, chunk_size, topk, bits)
        numel = codec.layout.numel
        for beta in (0.95, 1.0, 0.0):
            residual = _values("special", numel, layout)
            expected, unfused = residual.clone(), residual.clone()
            for round_ in range(3):
                start = _values("normal", numel, 100 * layout + round_)
                moved = _values("ties" if round_ == 1 else "special", numel, 100 * layout + 50 + round_)
                params, at = [], 0
                for n in numels:  # shaped tensors, as a fragment's parameters are
                    params.append(moved[at : at + n].clone().view(-1, 1) if n % 2 else moved[at : at + n].clone())
                    at += n
                delta = torch.cat([start[sum(numels[:i]) : sum(numels[: i + 1])] - p.reshape(-1)
                                   for i, p in enumerate(params)]) if numels else torch.empty(0)
                message = codec.encode_difference(residual, start, params, beta, torch.empty(numel))
                assert torch.equal(message, torch_codec.encode_residual(expected, delta, beta)), (layout, beta)
                assert same_bits(residual, expected), (layout, beta, round_)
                scratch = torch.empty(numel)
                assert torch.equal(torch_codec.encode_difference(unfused, start, params, beta, scratch), message)
                assert same_bits(unfused, expected) and same_bits(scratch, delta), (layout, beta, round_)
        with pytest.raises(ValueError, match="tensors of"):
            codec.encode_difference(residual, start, params[:-1], 1.0, torch.empty(numel))


@native
@pytest.mark.parametrize("bits", [2, 4, 8, 32])
def test_average_entries_are_the_dense_averages_entries(bits: int) -> None:
    """``average_entries`` of n messages (real ones, and garbage bytes): each position once, the positions where the
    dense ``decode_average`` may be nonzero, its bits there, natively and on the torch path alike; plain SGD on the
    entries alone (sparseloco's outer step), written back with ``put_entries``, moves the start as SGD on the dense
    average does, bit for bit, and sets the weights to it."""
    for layout, (numels, chunk_size, topk) in enumerate(LAYOUTS):
        codec, torch_codec = _codecs(numels, chunk_size, topk, bits)
        numel = codec.layout.numel
        g = torch.Generator().manual_seed(layout)
        messages = [codec.encode(_values(kind, numel, seed)) for seed, kind in enumerate(KINDS)]
        garbage = [torch.randint(0, 256, (codec.nbytes,), generator=g, dtype=torch.uint8) for _ in range(3)]
        for bufs, n in [(torch.cat(messages[:n]), n) for n in (1, 2, 3, len(messages))] + [(torch.cat(garbage), 3)]:
            dense = torch_codec.decode_average(bufs, n, torch.empty(numel))
            for which in (codec, torch_codec):
                positions, values = which.average_entries(bufs, n)
                assert positions.unique().numel() == positions.numel(), (layout, n)
                rebuilt = torch.zeros(numel)
                rebuilt[positions] = values
                assert same_bits(rebuilt, dense), (layout, bits, n)
                stepped, expected = _values("normal", numel, 7), _values("normal", numel, 7)
                expected.grad = dense
                torch.optim.SGD([expected], lr=0.7).step()
                moved = stepped.index_select(0, positions).add_(values, alpha=-0.7)
                params = [torch.full((m,), 5.0) for m in numels]
                which.put_entries(stepped, positions, moved, params)  # and the weights set to it, in one pass
                assert same_bits(stepped, expected.detach()), (layout, bits, n)
                assert same_bits(torch.cat(params) if params else torch.empty(0), stepped), (layout, bits, n)
        if codec.layout.chunk_count > 1:
            with pytest.raises(ValueError, match="grouped chunk by chunk"):  # the chunks in reverse order
                cpu.put(cpu.CpuLayout(codec.layout), positions.flip(0), values.flip(0), stepped)


@native
def test_threads_change_no_bit() -> None:
    numels, chunk_size, topk = [300_000, 70_001], 4096, 64  # over the kernels' parallel threshold
    codec, torch_codec = _codecs(numels, chunk_size, topk, 2)
    xs = [_values(kind, codec.layout.numel, seed) for seed, kind in enumerate(("normal", "special", "ties"))]
    expected = [torch_codec.encode(x) for x in xs]
    bufs = torch.cat(expected)
    average = torch_codec.decode_average(bufs, 3, torch.empty(codec.layout.numel))
    saved = get_threads()
    try:
        for threads in (2, 3):
            set_threads(threads)
            assert all(torch.equal(codec.encode(x), m) for x, m in zip(xs, expected))
            assert same_bits(codec.decode_average(bufs, 3, torch.empty(codec.layout.numel)), average)
    finally:
        set_threads(saved)


@pytest.mark.parametrize("error_decay", [0.95, 1.0])
def test_sparselocos_exchange_is_dilocos(error_decay: float) -> None:
    """diloco's FragmentExchange with the native codec (its sender side one call, ``encode_residual``) against the
    same exchange with the torch path of the codec, one rank: every round's message, residual and average, bit for
    bit; weighted rounds included, and ``keep_contribution`` (which takes the unfused steps)."""
    numels = [5000, 300, 4096]
    codec = ChunkTopK(numels, 1024, 16, 2)
    ours = FragmentExchange(sum(numels), codec, True, None, 1, error_decay=error_decay)
    theirs = FragmentExchange(sum(numels), ChunkTopK(numels, 1024, 16, 2, native=False), True, None, 1,
                              error_decay=error_decay)
    for round_ in range(4):
        delta = _values("normal" if round_ % 2 else "ties", sum(numels), round_)
        weights = [1.0] if round_ == 2 else None
        ours.start(delta, weights, keep_contribution=round_ == 3)
        theirs.start(delta, weights, keep_contribution=round_ == 3)
        assert torch.equal(ours.sent, theirs.sent) and same_bits(ours.residual, theirs.residual), round_
        assert same_bits(ours.wait(), theirs.wait()), round_
    # the round's other forms: the difference taken in the encoding, and the average as its entries
    start = _values("normal", sum(numels), 9)
    params = [_values("special", n, 10 + i) for i, n in enumerate(numels)]
    assert ours.takes_difference
    ours.start_difference(start, params, torch.empty(sum(numels)))
    theirs.start(torch.sub(start, torch.cat(params)))
    assert torch.equal(ours.sent, theirs.sent) and same_bits(ours.residual, theirs.residual)
    assert ours.averages_entries
    positions, values = ours.wait_entries()
    assert not ours.in_flight and not ours.averages_entries
    rebuilt = torch.zeros(sum(numels))
    rebuilt[positions] = values
    assert same_bits(rebuilt, theirs.wait())
    ours.start(start, [0.5], 0.5)  # a weighted round averages densely
    assert not ours.averages_entries


def test_the_torch_path_serves_under_bagua_native_python() -> None:
    script = ("import hashlib, torch\n"
              "from bagua_algorithms.sparseloco.codec import ChunkTopK\n"
              "c = ChunkTopK([5000, 300], 1024, 16, 2)\n"
              "x = torch.randn(5300, generator=torch.Generator().manual_seed(0))\n"
              "assert c._native.serving(x) is None\n"
              "print(hashlib.sha256(c.encode(x).numpy().tobytes()).hexdigest())\n")
    env = {**os.environ, "BAGUA_NATIVE": "python"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    x = torch.randn(5300, generator=torch.Generator().manual_seed(0))
    assert done.stdout.strip() == hashlib.sha256(ChunkTopK([5000, 300], 1024, 16, 2).encode(x).numpy().tobytes()).hexdigest()


@native
def test_the_benchmarks_fragment_lm11m() -> None:
    """The benchmark's model (benchmarks/lm.py's lm11m, 10.8M parameters): a round's messages and average."""
    from benchmarks.lm_model import build_lm

    numels = [p.numel() for p in build_lm("lm11m").parameters()]
    codec, torch_codec = _codecs(numels, 4096, 64, 2)
    xs = [_values("normal", codec.layout.numel, seed) for seed in range(2)]
    messages = [codec.encode(x) for x in xs]
    assert all(torch.equal(m, torch_codec.encode(x)) for m, x in zip(messages, xs))
    bufs = torch.cat(messages)
    assert same_bits(codec.decode_average(bufs, 2, torch.empty(codec.layout.numel)),
                     torch_codec.decode_average(bufs, 2, torch.empty(codec.layout.numel)))


# --- CUDA: the CUDA kernels give the C kernels' bits (skipped without a CUDA device) -------------------------


def _cuda_ready() -> None:
    from bagua_algorithms.sparseloco.kernels import cuda as sparseloco_cuda
    from bagua_core.runtime.native import cuda

    if not sparseloco_cuda.available():
        pytest.fail(f"CUDA exists but the kernels do not load: {cuda.unavailable_reason()}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("bits", [2, 4, 8, 32])
def test_cuda_messages_and_decoding_are_the_c_kernels(bits: int) -> None:
    _cuda_ready()
    for layout, (numels, chunk_size, topk) in enumerate(LAYOUTS):
        on_cpu = ChunkTopK(numels, chunk_size, topk, bits)
        on_gpu = ChunkTopK(numels, chunk_size, topk, bits, device="cuda")
        assert on_gpu._native.serving(torch.zeros(1, device="cuda")) is not None
        messages = []
        for seed, kind in enumerate(KINDS):
            x = _values(kind, on_cpu.layout.numel, seed)
            message = on_gpu.encode(x.cuda())
            assert message.is_cuda and torch.equal(message.cpu(), on_cpu.encode(x)), (layout, bits, kind)
            positions, values = on_gpu.entries(message)
            expected_positions, expected_values = on_cpu.entries(message.cpu())
            assert torch.equal(positions.cpu(), expected_positions) and same_bits(values.cpu(), expected_values)
            decoded = on_gpu.decode(message, 1, torch.empty(x.numel(), device="cuda"))
            assert same_bits(decoded.cpu(), on_cpu.decode(message.cpu(), 1, torch.empty(x.numel())))
            messages.append(message.cpu())
        g = torch.Generator().manual_seed(layout)
        messages += [torch.randint(0, 256, (on_cpu.nbytes,), generator=g, dtype=torch.uint8) for _ in range(2)]
        for n in (1, 2, len(messages)):
            bufs = torch.cat(messages[:n])
            expected = on_cpu.decode_average(bufs, n, torch.empty(on_cpu.layout.numel))
            got = on_gpu.decode_average(bufs.cuda(), n, torch.empty(on_cpu.layout.numel, device="cuda"))
            assert same_bits(got.cpu(), expected), (layout, bits, n)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("bits", [2, 32])
def test_cuda_encode_residual_is_the_c_kernels(bits: int) -> None:
    _cuda_ready()
    for layout, (numels, chunk_size, topk) in enumerate(LAYOUTS):
        on_cpu = ChunkTopK(numels, chunk_size, topk, bits)
        on_gpu = ChunkTopK(numels, chunk_size, topk, bits, device="cuda")
        residual = _values("special", on_cpu.layout.numel, layout)
        on_device = residual.cuda()
        for round_ in range(3):
            delta = _values("normal", on_cpu.layout.numel, 10 * layout + round_)
            message = on_gpu.encode_residual(on_device, delta.cuda(), 0.95)
            assert torch.equal(message.cpu(), on_cpu.encode_residual(residual, delta, 0.95)), (layout, round_)
            assert same_bits(on_device.cpu(), residual), (layout, round_)
