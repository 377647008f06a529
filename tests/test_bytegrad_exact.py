"""The bytegrad exchange gives exactly (bit for bit) what the reference recipe of DESIGN.md gives:
pad to a multiple of n with the last value, compress n chunks, average chunk j of every rank in fp32,
compress it again, decompress all; workspaces reused across calls and shapes, awkward padding, the
pipelined exchange with one and with many segments per chunk, several exchanges in flight at once and
completed in order as the module's scheduler completes its buckets, and a codec plugged into it."""

from __future__ import annotations

import torch
import torch.distributed as dist

from bagua_algorithms.bytegrad import pipeline
from bagua_algorithms.bytegrad.compressed import (CompressedWorkspace, compressed_allreduce_on,
                                                   start_compressed_allreduce_on)
from bagua_core.codecs import Codec, get_codec
from bagua_codecs.minmax_kernels import fallback
from bagua_core.runtime.process_group import get_default_group
from tests.distributed import run_workers

# (numel, average, dtype): 5 elements in 4 chunks and 4 in 3 leave chunks with no real element
CASES = [(1001, True, torch.float32), (5, True, torch.float32), (4, False, torch.float32), (2, True, torch.float32),
         (4096 * 3 + 7, True, torch.float32), (257, True, torch.float16), (1 << 16, True, torch.float32)]


def reference(inputs: list[torch.Tensor], average: bool, codec_name: str = "MinMaxUInt8") -> torch.Tensor:
    """The exchange computed in one process from every rank's input, with the codec ``codec_name``
    (``bagua_core.codecs``; MinMaxUInt8's are the native kernels): pad to n chunks with the last value,
    encode, average chunk j of every rank in fp32, encode it again, decode everything."""
    codec = get_codec(codec_name)
    n, numel = len(inputs), inputs[0].numel()
    chunk = -(-numel // n)
    size = codec.encoded_size(chunk, 1)
    sent = [codec.encode(torch.cat([x, x[-1:].expand(chunk * n - numel)]), n).view(n, size) for x in inputs]
    gathered = []
    for j in range(n):
        own = torch.empty(chunk, dtype=inputs[0].dtype)
        codec.decode_average([s[j].contiguous() for s in sent], n, own, average=average)
        gathered.append(codec.encode(own, 1))
    result = torch.empty(chunk * n, dtype=inputs[0].dtype)
    codec.decode(torch.cat(gathered), n, result)
    return result[:numel]


class TorchMinMaxUInt8(Codec):
    """MinMaxUInt8 from the torch fallback kernels, only the plain steps (the base class composes every
    fused one): a plugged-in codec."""

    name = "test_torch_minmax_uint8"
    bits_per_element = 8
    header_bytes = 8

    def encode_headers(self, x, n_chunks, out, *, nonfinite="propagate"):  # noqa: ANN001, ANN201
        return fallback.headers(x, n_chunks, "raise", out)

    def encode_range(self, x, n_chunks, out, begin, end):  # noqa: ANN001, ANN201
        return fallback.quantise(x, n_chunks, out, begin, end)

    def decode(self, buf, n_chunks, out, *, accumulate=False, begin=0, end=None):  # noqa: ANN001, ANN201
        return fallback.decompress(buf, n_chunks, out, accumulate, begin, end)

    def decode_average(self, bufs, n, out, *, average=True, begin=0, end=None):  # noqa: ANN001, ANN201
        parts = list(bufs.view(n, -1).unbind(0)) if isinstance(bufs, torch.Tensor) else bufs
        return fallback.decompress_sum(parts, out, average, begin, end)


def _exact(rank: int) -> None:
    comm = get_default_group().get_global_communicator()
    workspace = CompressedWorkspace()
    for repeat in range(2):  # the second round reuses the workspace (and reallocates on shape changes)
        pipeline.SEGMENT_NUMEL = 64 if repeat else 1 << 19  # many segments in the second round
        for numel, average, dtype in CASES:
            gen = torch.Generator().manual_seed(numel + 1000 * rank + repeat)
            x = (torch.randn(numel, generator=gen) * (rank + 1) + rank).to(dtype)
            inputs = [torch.empty_like(x) for _ in range(dist.get_world_size())]
            dist.all_gather(inputs, x)
            y = x.clone()
            compressed_allreduce_on(y, comm, average, workspace)
            expected = reference(inputs, average)
            assert torch.equal(y, expected), (numel, average, dtype, (y - expected).abs().max())
            plugged = x.clone()  # another codec, through the same pipelined exchange
            compressed_allreduce_on(plugged, comm, average, codec=TorchMinMaxUInt8())
            assert torch.equal(plugged, expected), (numel, average, dtype)


def test_exact_world_of_3() -> None:
    run_workers(_exact, 3)


def test_exact_world_of_4() -> None:
    run_workers(_exact, 4)


def _in_flight(rank: int) -> None:
    """Three exchanges (buckets) started one after another with round 1 left in flight (a later one's
    round 1 sent before an earlier one's round 2), then completed in order, as the module's scheduler
    completes its buckets at the end of backward: each ends exactly as the reference."""
    comm = get_default_group().get_global_communicator()
    for segment_numel in (1 << 19, 64):  # one segment per chunk; many
        pipeline.SEGMENT_NUMEL = segment_numel
        tensors, expected, finishes = [], [], []
        for k, numel in enumerate((4096 * 3 + 7, 1001, 1 << 14)):
            gen = torch.Generator().manual_seed(numel + 100 * rank + segment_numel)
            x = torch.randn(numel, generator=gen) * (k + 1)
            inputs = [torch.empty_like(x) for _ in range(dist.get_world_size())]
            dist.all_gather(inputs, x)
            expected.append(reference(inputs, True))
            tensors.append(x.clone())
            finishes.append(start_compressed_allreduce_on(tensors[-1], comm, True, CompressedWorkspace(), defer=True))
        for finish in finishes:
            finish()
        for y, want in zip(tensors, expected):
            assert torch.equal(y, want), (y.numel(), (y - want).abs().max())
    pipeline.SEGMENT_NUMEL = 1 << 19


def test_exchanges_left_in_flight_together() -> None:
    run_workers(_in_flight, 4)


def _nonfinite(rank: int) -> None:
    comm = get_default_group().get_global_communicator()
    codec = get_codec("MinMaxUInt8")  # BAGUA_NONFINITE unset: propagate
    pipeline.SEGMENT_NUMEL = 64
    x = torch.randn(1000, generator=torch.Generator().manual_seed(rank))
    if rank == 1:
        x[10] = float("nan")  # chunk 0 of every rank's average becomes NaN, the others stay finite
    compressed_allreduce_on(x, comm, True, codec=codec)
    everyone = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, x)
    chunk = -(-1000 // dist.get_world_size())
    assert bool(x[:chunk].isnan().all()) and bool(x[chunk:].isfinite().all())
    assert all(torch.equal(e.nan_to_num(), x.nan_to_num()) for e in everyone)
    pipeline.SEGMENT_NUMEL = 1 << 19


def test_nonfinite_propagates_through_the_pipelined_exchange() -> None:
    run_workers(_nonfinite, 3)
