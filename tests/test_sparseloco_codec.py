"""sparseloco's message (``bagua_algorithms.sparseloco.codec``), against the rules of docs/algorithms.md written
out here: per chunk the k' = min(k, len) entries of largest |x|, ties to the lowest index; at bits=32 the values
exact; at 2, 4 and 8 bits the documented quantiser; a message's bytes within the issue's bound for any layout;
a chunk holding NaN decodes to NaN and no other; the average of messages is their decoded mean in rank order."""

from __future__ import annotations

import pytest
import torch

from bagua_algorithms.sparseloco.codec import ChunkTopK
from bagua_core.selection.config import resolve_algorithm
from bagua_core.runtime.exceptions import BaguaConfigError


def _chunks(numels: list[int], chunk_size: int) -> list[tuple[int, int]]:
    """(first element in the fragment, length) of every chunk."""
    chunks, offset = [], 0
    for n in numels:
        chunks += [(offset + b, min(chunk_size, n - b)) for b in range(0, n, chunk_size)]
        offset += n
    return chunks


def _selected(x: torch.Tensor, numels: list[int], chunk_size: int, topk: int) -> list[list[int]]:
    """Per chunk, the fragment indices the rule selects (largest |x| first, then the lowest index)."""
    out = []
    for begin, length in _chunks(numels, chunk_size):
        values = x[begin : begin + length].abs().tolist()
        order = sorted(range(length), key=lambda i: (-values[i], i))[: min(topk, length)]
        out.append(sorted(begin + i for i in order))
    return out


def _expected_value(v: torch.Tensor, chunk: torch.Tensor, bits: int) -> torch.Tensor:
    """docs/algorithms.md's quantiser for one value ``v`` of a chunk sending ``chunk`` (fp32 scalars)."""
    levels = 2 ** (bits - 1)
    hi, lo = chunk.abs().max(), chunk.abs().min()
    q = torch.round(lo / hi * 65535) if hi > 0 else torch.tensor(0.0)
    floor = hi * q / 65535
    j = torch.round((v.abs() - floor) / (hi - floor) * (levels - 1)).clamp(0, levels - 1) if hi > floor else 0 * hi
    w = j / (levels - 1)
    magnitude = floor * (1 - w) + hi * w
    return -magnitude if v < 0 else magnitude


LAYOUTS = [([5000, 10, 0, 4096, 300], 4096, 64), ([1, 2, 3, 700], 64, 5), ([999], 1000, 1000), ([130, 7], 8, 8)]


@pytest.mark.parametrize("bits", [32, 2, 4, 8])
@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_the_message_selects_and_quantises_as_documented(layout: int, bits: int) -> None:
    numels, chunk_size, topk = LAYOUTS[layout]
    g = torch.Generator().manual_seed(layout)
    x = torch.randint(-6, 7, (sum(numels),), generator=g).float() / 4  # many ties
    codec = ChunkTopK(numels, chunk_size, topk, bits)
    message = codec.encode(x)
    decoded = codec.decode(message, 1, torch.full_like(x, 7.0))
    chosen = _selected(x, numels, chunk_size, topk)
    every = [i for chunk in chosen for i in chunk]
    rest = torch.ones_like(x, dtype=torch.bool)
    rest[every] = False
    assert torch.all(decoded[rest] == 0)
    for indices in chosen:
        if bits == 32:
            assert torch.equal(decoded[indices], x[indices])
            continue
        for i in indices:
            expected = _expected_value(x[i], x[indices], bits)
            assert decoded[i] == expected, (i, x[i], decoded[i], expected)
    bound = sum(min(topk, length) * (bits / 8 + 2) + 8 for _, length in _chunks(numels, chunk_size))
    assert message.numel() == codec.nbytes <= bound


def test_two_bits_send_the_chunks_smallest_or_largest_magnitude() -> None:
    x = torch.tensor([0.1, -3.0, 2.0, -1.0, 1.4, 0.0, 2.9, -1.6])
    codec = ChunkTopK([8], 8, 6, 2)  # sends -3, 2, -1, 1.4, 2.9, -1.6: lo 1.0, hi 3.0, midpoint 2.0
    decoded = codec.decode(codec.encode(x), 1, torch.empty_like(x))
    assert decoded.tolist() == pytest.approx([0, -3.0, 1.0, -1.0, 1.0, 0, 3.0, -1.0], abs=1e-4)
    assert decoded[1].item() == -3.0 and decoded[6].item() == 3.0  # hi travels as fp32


def test_a_message_is_within_the_bound_for_any_layout() -> None:
    g = torch.Generator().manual_seed(3)
    for _ in range(200):
        numels = [int(n) for n in torch.randint(0, 3000, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g)]
        chunk_size = int(torch.randint(1, 2000, (1,), generator=g))
        topk = int(torch.randint(1, chunk_size + 1, (1,), generator=g))
        for bits in (2, 4, 8, 32):
            codec = ChunkTopK(numels, chunk_size, topk, bits)
            bound = sum(min(topk, length) * (bits / 8 + 2) + 8 for _, length in _chunks(numels, chunk_size))
            assert codec.nbytes <= bound, (numels, chunk_size, topk, bits, codec.nbytes, bound)


@pytest.mark.parametrize("bits", [2, 32])
def test_a_chunk_holding_nan_decodes_to_nan_and_no_other(bits: int) -> None:
    x = torch.arange(1.0, 41.0)
    x[5] = float("nan")
    codec = ChunkTopK([40], 20, 4, bits)
    decoded = codec.decode(codec.encode(x), 1, torch.empty_like(x))
    assert decoded[:20].isnan().sum() == (4 if bits == 2 else 1) and decoded[5].isnan()
    assert torch.isfinite(decoded[20:]).all() and decoded[36:].ne(0).all()


def test_the_average_is_the_mean_of_the_decoded_messages_in_order() -> None:
    g = torch.Generator().manual_seed(5)
    codec = ChunkTopK([300, 41], 50, 5, 2)  # 7 chunks, 35 entries: 121 bytes, so the second message's fp32
    assert codec.nbytes == 6 * 7 + 2 * 35 + 9  # header starts on an odd byte of the gathered buffer
    xs = [torch.randn(341, generator=g) for _ in range(3)]
    messages = [codec.encode(x) for x in xs]
    average = codec.decode_average(torch.cat(messages), 3, torch.empty(341))
    expected = torch.zeros(341)
    for m in messages:
        expected += codec.decode(m, 1, torch.empty(341))
    assert torch.equal(average, expected / 3)


@pytest.mark.parametrize("options, field", [
    ({"topk": 0}, "topk"),
    ({"topk": 65, "chunk_size": 64}, "topk"),
    ({"chunk_size": 0}, "chunk_size"),
    ({"chunk_size": 65537}, "chunk_size"),
    ({"bits": 3}, "bits"),
    ({"error_decay": 1.5}, "error_decay"),
    ({"outer_lr": 0}, "outer_lr"),
    ({"inner_steps": 0}, "inner_steps"),
    ({"top_k": 5}, "top_k"),
])
def test_options_are_validated_by_name(options: dict, field: str) -> None:
    with pytest.raises(BaguaConfigError, match=rf"sparseloco\.{field}:"):
        resolve_algorithm({"name": "sparseloco", **options})


def test_topk_above_the_chunk_says_what_to_do() -> None:
    with pytest.raises(BaguaConfigError, match=r"topk \(65\) must be at most chunk_size \(64\)"):
        resolve_algorithm({"name": "sparseloco", "topk": 65, "chunk_size": 64})


def test_any_bytes_decode_inside_the_fragment() -> None:
    """A collective that failed (a peer died in it) leaves garbage in the gathered buffer: decoding it must not
    raise (fault-tolerant mode discards the step after it)."""
    codec = ChunkTopK([300, 41], 50, 5, 2)
    garbage = torch.full((2 * codec.nbytes,), 255, dtype=torch.uint8)
    out = codec.decode_average(garbage, 2, torch.empty(341))
    assert out.shape == (341,)
