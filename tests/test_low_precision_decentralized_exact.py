"""The pipelined low_precision_decentralized round gives exactly (bit for bit) the replicas and weights
of the recipe of DESIGN.md computed with torch and the plain kernels from every rank's state: rings of
2 (one neighbour) and 3, one and many segments, several rounds (one with the difference computed
ahead, one overlapped: the neighbours' messages added after the round returned), and a codec plugged into it."""

from __future__ import annotations

import torch
import torch.distributed as dist

from bagua_codecs import minmax_kernels as minmax
from bagua_algorithms.bytegrad import pipeline
from bagua_algorithms.low_precision_decentralized.op import LowPrecisionDecentralizedOp
from bagua_core.runtime.process_group import get_default_group
from tests.distributed import run_workers
from tests.test_bytegrad_exact import TorchMinMaxUInt8


def _gather(t: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return out


def _reference_round(x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """This rank's (x, w, left, right) after one round, from every rank's state."""
    n, me = dist.get_world_size(), dist.get_rank()
    xs, ws, ls, rs = (_gather(t) for t in (x, w, left, right))
    c = [minmax.compress_minmax_uint8(xs[k] + ls[k] / 3 + rs[k] / 3 - ws[k] * (5 / 3), 1) for k in range(n)]
    w, left, right = (minmax.decompress_minmax_uint8(c[k], 1, t.clone(), accumulate=True)
               for k, t in ((me, w), ((me - 1) % n, left), ((me + 1) % n, right)))
    return w.clone(), w, left, right


def _op(initial: torch.Tensor) -> LowPrecisionDecentralizedOp:
    """The op over three replicas starting at ``initial`` (as the algorithm creates them)."""
    return LowPrecisionDecentralizedOp(None, False, initial.clone(), initial.clone(), initial.clone())


def _exact(rank: int) -> None:
    comm = get_default_group().get_global_communicator()
    for numel, segment_numel, plugged in ((10007, 1 << 19, False), (10007, 300, False), (5, 2, False), (4099, 256, True)):
        pipeline.SEGMENT_NUMEL = segment_numel
        gen = torch.Generator().manual_seed(numel)
        initial = torch.randn(numel, generator=gen)
        op = _op(initial)
        if plugged:
            op.codec = TorchMinMaxUInt8()
        x = initial.clone()
        for step in range(3):
            x += torch.randn(numel, generator=torch.Generator().manual_seed(100 * rank + step)) * 0.1  # an optimizer step
            expected = _reference_round(x, op.weight, op.left_peer_weight, op.right_peer_weight)
            if step == 1:  # the difference computed ahead (the algorithm's prepare), then the exchange
                op._difference(x)
                op._ring_step(x, comm, prepared=True)
            elif step == 2:  # overlapped (the algorithm's): x and w final at once, l and r once finished
                finish = op._ring_step(x, comm, defer=True)
                assert finish is not None
                assert torch.equal(x, expected[0]) and torch.equal(op.weight, expected[1]), (numel, segment_numel)
                finish()
            else:
                op._ring_step(x, comm)
            got = (x, op.weight, op.left_peer_weight, op.right_peer_weight)
            for name, a, b in zip("xwlr", got, expected):
                assert torch.equal(a, b), (numel, segment_numel, step, name, (a - b).abs().max())
    pipeline.SEGMENT_NUMEL = 1 << 19


def test_exact_ring_of_2() -> None:
    run_workers(_exact, 2)


def test_exact_ring_of_3() -> None:
    run_workers(_exact, 3)


class _Alone:
    """A communicator of one rank (a ring of one node)."""

    def nranks(self) -> int:
        return 1

    def rank(self) -> int:
        return 0


def test_exact_alone() -> None:
    initial = torch.randn(1001, generator=torch.Generator().manual_seed(0))
    op = _op(initial)
    x = initial + 0.5
    c = minmax.compress_minmax_uint8(x + initial / 3 + initial / 3 - initial * (5 / 3), 1)
    expected = minmax.decompress_minmax_uint8(c, 1, initial.clone(), accumulate=True)
    op._ring_step(x, _Alone())
    for got in (x, op.weight, op.left_peer_weight, op.right_peer_weight):
        assert torch.equal(got, expected)
