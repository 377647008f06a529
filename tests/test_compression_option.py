"""``compression="<codec>"`` of bytegrad, qadam and low_precision_decentralized: any installed codec goes
through the same (pipelined) exchanges, with exactly the bits of the reference recipe written with that
codec's own encode/decode, every rank equal where the algorithm promises it; an unknown name is refused
before anything is communicated."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from pydantic import ValidationError

from bagua_algorithms.bytegrad import pipeline
from bagua_algorithms.bytegrad.compressed import CompressedWorkspace, compressed_allreduce_on
from bagua_algorithms.low_precision_decentralized import kernels as lpd_kernels
from bagua_algorithms.low_precision_decentralized.op import LowPrecisionDecentralizedOp
from bagua_core.codecs import Codec, get_codec
from bagua_core.runtime.process_group import get_default_group
from tests.distributed import run_workers
from tests.test_bytegrad_exact import reference

CODECS = ["MinMaxUInt4", "fp16", "bf16", "ScaledSign"]


def _allreduce_exact(rank: int) -> None:
    comm = get_default_group().get_global_communicator()
    for name in CODECS:
        codec, workspace = get_codec(name), CompressedWorkspace()
        for segment_numel in (1 << 19, 64):  # one segment per chunk, then many
            pipeline.SEGMENT_NUMEL = segment_numel
            for numel, average, dtype in ((1001, True, torch.float32), (5, True, torch.float32),
                                          (4096 + 9, False, torch.float32), (300, True, torch.float16)):
                gen = torch.Generator().manual_seed(numel + 100 * rank)
                x = (torch.randn(numel, generator=gen) * (rank + 1)).to(dtype)
                inputs = [torch.empty_like(x) for _ in range(dist.get_world_size())]
                dist.all_gather(inputs, x)
                y = x.clone()
                compressed_allreduce_on(y, comm, average, workspace, codec)
                expected = reference(inputs, average, name)
                assert torch.equal(y, expected), (name, segment_numel, numel, (y.float() - expected.float()).abs().max())
    pipeline.SEGMENT_NUMEL = 1 << 19


def test_bytegrad_exchange_with_every_codec_is_the_reference_3_ranks() -> None:
    run_workers(_allreduce_exact, 3)


def _lpd_exact(rank: int) -> None:
    comm = get_default_group().get_global_communicator()
    n, me = dist.get_world_size(), dist.get_rank()
    for name in ("MinMaxUInt4", "fp16"):
        codec = get_codec(name)
        initial = torch.randn(2051, generator=torch.Generator().manual_seed(7))
        op = LowPrecisionDecentralizedOp(None, False, initial.clone(), initial.clone(), initial.clone())
        op.codec = get_codec(name)
        x = initial.clone()
        for step in range(2):
            x += torch.randn(initial.numel(), generator=torch.Generator().manual_seed(10 * rank + step)) * 0.1
            states = [[torch.empty_like(t) for _ in range(n)] for t in (x, op.weight, op.left_peer_weight,
                                                                         op.right_peer_weight)]
            for gathered, t in zip(states, (x, op.weight, op.left_peer_weight, op.right_peer_weight)):
                dist.all_gather(gathered, t)
            xs, ws, ls, rs = states
            sent = [codec.encode(xs[k] + ls[k] / 3 + rs[k] / 3 - ws[k] * (5 / 3)) for k in range(n)]
            expected = [codec.decode(sent[k], 1, t.clone(), accumulate=True)
                        for k, t in ((me, ws[me]), ((me - 1) % n, ls[me]), ((me + 1) % n, rs[me]))]
            op._ring_step(x, comm)
            for label, got, want in zip("xwlr", (x, op.weight, op.left_peer_weight, op.right_peer_weight),
                                        (expected[0], *expected)):
                assert torch.equal(got, want), (name, step, label, (got - want).abs().max())


def test_low_precision_decentralized_ring_with_a_codec_is_the_reference_3_ranks() -> None:
    run_workers(_lpd_exact, 3)


def _train(rank: int, spec: dict) -> None:
    from bagua_algorithms.q_adam import QAdamOptimizer

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    if spec["name"] == "qadam":
        optimizer = QAdamOptimizer(model.parameters(), lr=1e-2, warmup_steps=2)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], dict(spec))
    assert model.bagua_algorithm.config.compression == spec["compression"]
    gen = torch.Generator().manual_seed(rank)
    for _ in range(5):
        x = torch.randn(8, 16, generator=gen)
        loss = (model(x) - 1).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.isfinite(flat).all()
    everyone = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, flat)
    if spec["name"] != "low_precision_decentralized":  # decentralized ranks differ by design
        assert all(torch.equal(everyone[0], other) for other in everyone), spec


@pytest.mark.parametrize("spec", [
    {"name": "bytegrad", "compression": "MinMaxUInt4", "hierarchical": False},
    {"name": "qadam", "compression": "bf16", "hierarchical": False},
    {"name": "low_precision_decentralized", "compression": "ScaledSign", "hierarchical": False},
])
def test_algorithms_train_with_a_codec_option(spec: dict) -> None:
    run_workers(_train, 2, spec)


def test_unknown_codec_is_refused_naming_the_installed_ones() -> None:
    from bagua_algorithms.bytegrad import ByteGradConfig

    with pytest.raises(ValidationError, match=r"unknown codec 'MinMaxUInt3' \(did you mean 'MinMaxUInt\d'\?\); available: .*MinMaxUInt4"):
        ByteGradConfig(compression="MinMaxUInt3")
    with pytest.raises(ValueError, match="unknown codec"):
        LowPrecisionDecentralizedOp(None, False, *(torch.zeros(2) for _ in range(3)), compression="MinMaxUInt3")


FUSED_STEPS = ("new_stats", "decode_average_with_stats", "encode_headers_with_stats", "encode_range_decoding")


def test_minmax_uint8_keeps_the_native_fused_steps() -> None:
    """One codec contract: the registered MinMaxUInt8 (bagua_codecs) carries the native fused steps, the
    others run on the base class's compositions of their plain steps. The steps that fuse an algorithm's
    math with a codec are the algorithm's (low_precision_decentralized's kernels fuse MinMaxUInt8 only)."""
    from bagua_codecs import MinMaxUInt8Codec

    minmax, fp16 = get_codec("MinMaxUInt8"), get_codec("fp16")
    assert type(minmax) is MinMaxUInt8Codec
    for step in FUSED_STEPS:
        assert getattr(type(minmax), step) is not getattr(Codec, step), step
        assert getattr(type(fp16), step) is getattr(Codec, step), step
    assert not [step for step in dir(Codec) if step.startswith("lpd_")]
    assert lpd_kernels.fuses(minmax) and not lpd_kernels.fuses(fp16)


def test_fused_steps_give_the_bytes_of_their_default_compositions() -> None:
    """MinMaxUInt8's native fused steps (its own, and low_precision_decentralized's with it) against the
    compositions of its plain steps (the path of a codec without fused steps): the same bytes and values, a
    short last chunk included."""
    codec = get_codec("MinMaxUInt8")
    gen = torch.Generator().manual_seed(3)
    n, numel = 3, 1000
    chunk = -(-numel // n)
    bufs = [codec.encode(torch.randn(chunk, generator=gen) * (k + 1), 1) for k in range(n)]
    fused_out, plain_out = torch.empty(chunk), torch.empty(chunk)
    stats = codec.new_stats()
    codec.decode_average_with_stats(bufs, n, fused_out, stats, average=True)
    Codec.decode_average_with_stats(codec, bufs, n, plain_out, None, average=True)
    assert torch.equal(fused_out, plain_out)
    size = codec.encoded_size(chunk, 1)
    fused_buf, plain_buf = torch.empty(size, dtype=torch.uint8), torch.empty(size, dtype=torch.uint8)
    codec.encode_headers_with_stats(fused_out, 1, fused_buf, stats)
    Codec.encode_headers_with_stats(codec, fused_out, 1, plain_buf, None)
    for decoded_numel in (chunk, chunk - 7, 0):  # the own chunk, a short last one, one past the end
        fused_decoded, plain_decoded = torch.full((decoded_numel,), 5.0), torch.full((decoded_numel,), 5.0)
        for begin, end in ((0, 64), (64, chunk)):
            codec.encode_range_decoding(fused_out, fused_buf, begin, end, fused_decoded)
            Codec.encode_range_decoding(codec, fused_out, plain_buf, begin, end, plain_decoded)
        assert torch.equal(fused_buf, plain_buf) and torch.equal(fused_buf, codec.encode(fused_out, 1))
        assert torch.equal(fused_decoded, plain_decoded)
    x, w, left, right = (torch.randn(numel, generator=gen) for _ in range(4))
    z_fused, z_plain, stats = torch.empty(numel), torch.empty(numel), codec.new_stats()
    lpd_kernels.difference(codec, x, w, left, right, z_fused, stats)
    lpd_kernels.lpd_difference(x, w, left, right, z_plain)
    assert torch.equal(z_fused, z_plain)
    sent = codec.encode(z_fused, 1)
    replicas = [[t.clone() for t in (w, left, right, x)] for _ in range(2)]
    lpd_kernels.update(codec, sent, sent, sent, *replicas[0][:3], replicas[0][3], 0, numel)
    lpd_kernels.composed_update(codec, sent, sent, sent, *replicas[1][:3], replicas[1][3], 0, numel)
    assert all(torch.equal(a, b) for a, b in zip(*replicas))
