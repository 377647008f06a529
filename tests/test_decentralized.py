"""decentralized equals a reference written from the formula in plain torch.distributed, for
peer_selection_mode all / shift_one, communication intervals 1, 2, 3, flat and hierarchical."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_algorithms.decentralized import DecentralizedAlgorithm
from bagua_algorithms.decentralized.op import shift_one_peer
from tests.distributed import run_workers
from tests.models import SmallNet, batch

STEPS = 7


def _reference_peer(r: int, n: int, s: int) -> int:
    """The shift_one partner, transcribed from DESIGN.md (even n); odd n: paired as among n + 1 peers, the
    one paired with the missing peer n has no partner (itself)."""
    if n % 2:
        peer = _reference_peer(r, n + 1, s)
        return r if peer == n else peer
    if r < n // 2:
        return ((s + r) % ((n + 1) // 2)) + n // 2
    return (r - n // 2 - s) % (n // 2)


def _reference_average(flat: torch.Tensor, mode: str, hierarchical: bool, local_size: int, s: int) -> torch.Tensor:
    """What this rank's weights become, computed from every rank's weights (all_gather)."""
    n, me = dist.get_world_size(), dist.get_rank()
    everyone = [torch.empty_like(flat) for _ in range(n)]
    dist.all_gather(everyone, flat)
    if hierarchical:  # peers are the nodes' averages
        peers = [sum(everyone[k * local_size : (k + 1) * local_size]) / local_size for k in range(n // local_size)]
        mine = me // local_size
    else:
        peers, mine = everyone, me
    if mode == "all":
        return sum(peers) / len(peers)
    if len(peers) == 1:  # shift_one with one peer (one node): the intra-node average is the step
        return peers[0]
    return (peers[mine] + peers[_reference_peer(mine, len(peers), s)]) / 2


def _params_flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _run_case(rank: int, mode: str, interval: int, hierarchical: bool, local_size: int, do_flatten: bool) -> None:
    reference = SmallNet(seed=0)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    model = SmallNet(seed=rank)  # wrapping broadcasts rank 0's weights
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    algorithm = DecentralizedAlgorithm(hierarchical=hierarchical, peer_selection_mode=mode, communication_interval=interval)
    model = model.with_bagua([optimizer], algorithm, do_flatten=do_flatten)
    assert len(model.bagua_buckets) == 1
    for t in range(STEPS):
        x, y = batch(rank, t)
        # reference: gradient at x_t, x <- avg(x_t) on communication steps, then the optimizer step
        ref_opt.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        if t % interval == 0:
            averaged = _reference_average(_params_flat(reference), mode, hierarchical, local_size, t // interval)
            with torch.no_grad():
                offset = 0
                for p in reference.parameters():
                    p.copy_(averaged[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
        ref_opt.step()

        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        torch.testing.assert_close(_params_flat(model), _params_flat(reference), rtol=1e-5, atol=1e-6,
                                   msg=lambda m, c=f"{mode} interval={interval} hier={hierarchical} step {t}": f"{c}: {m}")
    # the weights really differ between ranks (otherwise the test could not tell modes apart)
    everyone = [torch.empty_like(_params_flat(model)) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, _params_flat(model))
    assert not torch.equal(everyone[0], everyone[-1])


def _check_cases(rank: int, cases: list[tuple], local_size: int) -> None:
    for mode, interval, hierarchical, do_flatten in cases:
        _run_case(rank, mode, interval, hierarchical, local_size, do_flatten)


def test_shift_one_peers_pair_up() -> None:
    for n in (2, 4, 6, 8):
        for s in range(2 * n):
            peers = [shift_one_peer(r, n, s) for r in range(n)]
            assert peers == [_reference_peer(r, n, s) for r in range(n)]
            assert all(peers[peers[r]] == r and peers[r] != r for r in range(n))


def test_shift_one_odd_peers_leave_one_out_in_turn() -> None:
    for n in (1, 3, 5, 7):
        alone_over_a_period = []
        for s in range(2 * n):
            peers = [shift_one_peer(r, n, s) for r in range(n)]
            assert peers == [_reference_peer(r, n, s) for r in range(n)]
            assert all(peers[peers[r]] == r for r in range(n))  # a matching (a rank alone is its own partner)
            alone = [r for r in range(n) if peers[r] == r]
            assert len(alone) == 1, (n, s, peers)
            alone_over_a_period += alone
        # the one without a partner rotates through the lower half, so nobody is left out for long
        assert set(alone_over_a_period) == set(range((n + 1) // 2)), (n, alone_over_a_period)


@pytest.mark.parametrize(
    "world_size,local_size,cases",
    [
        (2, 2, [("all", 1, False, True), ("shift_one", 1, False, True), ("all", 2, False, False),
                ("shift_one", 3, False, True),
                # one node, hierarchical: no peer among nodes, the step is the intra-node average
                ("shift_one", 1, True, True), ("shift_one", 2, True, False)]),
        (4, 2, [("shift_one", 1, False, True), ("all", 3, False, True), ("shift_one", 2, False, False),
                ("all", 1, True, True), ("shift_one", 1, True, True), ("shift_one", 2, True, False)]),
        # an odd number of peers: one per round has no partner and keeps its weights
        (3, 1, [("shift_one", 1, False, True), ("shift_one", 2, False, False), ("shift_one", 1, True, True)]),
        (6, 2, [("shift_one", 1, True, True)]),  # three nodes
    ],
)
def test_equals_reference(world_size: int, local_size: int, cases: list[tuple]) -> None:
    run_workers(_check_cases, world_size, cases, local_size, local_size=local_size)


def _in_flight(rank: int) -> None:
    from bagua_core.lifecycle.bucket import BaguaBucket

    deferred_after_op = []
    original = BaguaBucket.execute_ops

    def execute(bucket: BaguaBucket, deferrable: bool = False) -> None:
        original(bucket, deferrable)
        deferred_after_op.append(len(bucket._deferred))  # what the op left in flight when it returned

    BaguaBucket.execute_ops = execute
    try:
        _check_cases(rank, [("all", 1, False, True), ("shift_one", 2, True, False), ("all", 1, True, True)], 1)
    finally:
        BaguaBucket.execute_ops = original
    assert deferred_after_op and all(deferred_after_op)


def test_exchange_stays_in_flight_in_pieces() -> None:
    """The op returns with its exchange in flight (the end of backward completes it); "all" allreduces
    pieces of BAGUA_DEFAULT_BUCKET_SIZE bytes (here 1 KiB: many pieces) and still equals the reference."""
    run_workers(_in_flight, 2, local_size=1, env={"BAGUA_DEFAULT_BUCKET_SIZE": "1024", "BAGUA_SMALL_ALLREDUCE_BYTES": "0"})


def _node_pieces(rank: int) -> None:
    from bagua_algorithms.decentralized import op as full_precision_op

    reduces, original = [], full_precision_op.reduce_inplace

    def counted(tensor: torch.Tensor, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        reduces.append(tensor.numel())
        original(tensor, *args, **kwargs)

    full_precision_op.reduce_inplace = counted
    try:
        _check_cases(rank, [("shift_one", 1, True, True), ("all", 1, True, False)], 2)
    finally:
        full_precision_op.reduce_inplace = original
    # 1 KiB pieces: the SmallNet's weights went in several pieces per step, none larger than 256 values
    params = sum(p.numel() for p in SmallNet(seed=0).parameters())
    assert max(reduces) <= 256 and len(reduces) >= 2 * STEPS * (params // 256), (len(reduces), params)


def test_hierarchical_exchange_in_pieces_equals_reference() -> None:
    """Several ranks per node: the weights are reduced in the node and exchanged piece by piece (each piece's
    exchange starts once it is reduced; here 1 KiB pieces) and still equal the reference, over 3 nodes."""
    run_workers(_node_pieces, 6, local_size=2, env={"BAGUA_DEFAULT_BUCKET_SIZE": "1024", "BAGUA_SMALL_ALLREDUCE_BYTES": "0"})
