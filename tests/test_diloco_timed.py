"""diloco and sparseloco with rounds bounded in time (``round_seconds``). Each rank's clock is a fake one
(``bagua_algorithms.diloco.timed.clock``) that advances a fixed cost per step, so who ends a round when is
deterministic; the trained weights equal, at every step, a reference written here from docs/algorithms.md's
statement: a replica ends its round after the step at which ``elapsed + elapsed / steps / 2 >= round_seconds``
and no round of its own is in flight, sends it without waiting, and merges it at the first step end at which it
has landed (the steps at which the replicas merged are read from the run: they depend on when the others sent),
keeping what it trained meanwhile; the merge weights each replica's pseudo-gradient (diloco, plain and through a
codec) or sent message (sparseloco) by the samples it trained on in the round. In lockstep (fault-tolerant
mode's, emulated here without the courier and with ``round_syncs`` asked before every step, as the runtime does)
each replica ends its round at the step it chose before the step ran, from its round's mean step so far, and
merges at once: that too equals the reference, with equal samples it is rounds of ``inner_steps``, bit for bit,
and a replica healed in the middle of a round (a joiner) merges with weight 0, and nothing else changes. Loops that make a collective of their own between steps, or end
at the same step count on ranks of unequal speed, finish on every rank (the join at shutdown)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_core.api import samples_in
from bagua_core.codecs import get_codec
from tests.distributed import run_workers
from tests.test_diloco import _assign, _flat
from tests.test_powersgd import Net, _batch, _params


class FakeClock:
    """The seconds a rank's rounds read: advanced by hand, one step's cost at a time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _install_clock() -> FakeClock:
    from bagua_algorithms.diloco import timed

    clock = FakeClock()
    timed.clock = clock
    return clock


def _batch_of(rank: int, t: int, sizes: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = _batch(rank, t)  # 16 samples
    size = sizes[rank] if sizes else 16
    return x[:size], y[:size]


def _cost(costs: list[list[float]], rank: int, t: int) -> float:
    """Rank ``rank``'s step ``t`` costs this many fake seconds (its pattern of costs, repeated)."""
    pattern = costs[rank]
    return pattern[(t - 1) % len(pattern)]


def _step(model, optimizer, rank: int, t: int, sizes, clock: FakeClock | None = None, cost: float = 0.0,
          lockstep: bool = False) -> int:
    x, y = _batch_of(rank, t, sizes)
    if lockstep:  # fault-tolerant mode's runtime asks it before every step (and joins a quorum if True)
        model.bagua_algorithm.round_syncs(model)
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    if clock is not None:
        clock.now += cost  # the step takes its cost: the rounds read it at the step's end
    loss.backward()
    optimizer.step()
    return len(x)


def _weighted_sum(mine: torch.Tensor, n: int) -> torch.Tensor:
    """``sum_r n_r * mine_r / sum_r n_r`` over the job, in float64, rank order."""
    counts = [torch.zeros(1, dtype=torch.float64) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([float(n)], dtype=torch.float64))
    everyone = [torch.empty_like(mine) for _ in counts]
    dist.all_gather(everyone, mine.contiguous())
    total = sum(float(c) for c in counts)
    return sum(float(c) * other.double() for c, other in zip(counts, everyone)).div(total).float()


def _reference(rank: int, options: dict, costs, sizes, rounds: int, heal: tuple[int, int] | None = None,
               merges_at: list[int] | None = None, predicted: bool = False) -> list:
    """The weights after every step, as docs/algorithms.md states the mode, through the step of the ``rounds``-th
    merge: ``merges_at``, the step at which each round merged (None: at once); ``predicted`` (lockstep): the step
    that ends a round is chosen before it runs; ``heal`` (lockstep): (round, step in it) at which rank 2's weights
    are replaced by rank 0's and it merges that round with weight 0."""
    T, name = options["round_seconds"], options.get("name", "diloco")
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    params = list(model.parameters())
    start = _flat(params)
    outer = torch.optim.SGD([start], lr=options.get("outer_lr", 0.7), momentum=0.9, nesterov=True) \
        if name == "diloco" else None
    codec = get_codec(options["compression"]) if options.get("compression") else None
    residual = torch.zeros_like(start)
    history, t, j, merged, pending = [], 0, 0, 0, None
    elapsed, k, n, last_mean, ends = 0.0, 0, 0, 0.0, False
    while merged < rounds:
        t += 1
        if predicted:  # the round ends with this step if its end, predicted by the mean step, is nearest T
            after = elapsed + (elapsed / k if k else last_mean)
            ends = pending is None and after + after / (k + 1) / 2 >= T
        n += _step(model, optimizer, rank, t, sizes)
        elapsed, k = elapsed + _cost(costs, rank, t), k + 1
        if heal == (j, k):  # rank 2 takes rank 0's weights and optimizer state
            weights, state = _flat(params), [optimizer.state_dict()]
            dist.broadcast(weights, 0)
            dist.broadcast_object_list(state, 0)
            if rank == 2:
                _assign(params, weights)
                optimizer.load_state_dict(state[0])
        if pending is not None and t == merges_at[merged]:  # landed: the outer step, what was trained meanwhile kept
            update, x_sent = pending
            update()
            _assign(params, (_flat(params) - x_sent) + start)
            merged, pending = merged + 1, None
            if merged == rounds:
                history.append(_params(model))
                break
        if (not ends) if predicted else (pending is not None or elapsed + elapsed / k / 2 < T):
            history.append(_params(model))
            continue
        if heal is not None and heal[0] == j and rank == 2:
            n = 0
        x_sent = _flat(params)
        delta = start - x_sent
        if name == "sparseloco":  # bits=32: the top-k of e, exactly
            C, k_, beta = options.get("chunk_size", 4096), options.get("topk", 64), options.get("error_decay", 0.95)
            residual.mul_(beta).add_(delta)
            sent = torch.zeros_like(residual)
            at = 0
            for p in params:
                for begin in range(at, at + p.numel(), C):
                    chunk = residual[begin : min(begin + C, at + p.numel())]
                    top = torch.topk(chunk.abs(), min(k_, chunk.numel())).indices
                    sent[begin + top] = chunk[top]
                at += p.numel()
            residual -= sent
            average = _weighted_sum(sent, n)

            def update(average=average) -> None:
                with torch.no_grad():
                    start.sub_(options.get("outer_lr", 1.0) * average)
        else:
            if codec is not None:
                residual += delta
                delta = codec.decode(codec.encode(residual), 1, torch.empty_like(residual))
                residual -= delta
            average = _weighted_sum(delta, n)

            def update(average=average) -> None:
                start.grad = average
                outer.step()
        j, elapsed, k, n, last_mean = j + 1, 0.0, 0, 0, elapsed / k
        if merges_at is None:  # lockstep: merged at once, the local weights replaced
            update()
            _assign(params, start)
            merged += 1
        else:
            pending = (update, x_sent)
        history.append(_params(model))
    return history


def _run_both(rank: int, options: dict, costs, sizes, rounds: int, heal=None, lockstep: bool = False) -> list:
    """The run, then the reference given the steps at which the run merged; each replica's merge weights."""
    clock = _install_clock()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    spec = {"name": "diloco", **options} if "name" not in options else dict(options)
    if spec["name"] == "sparseloco":
        spec["bits"] = 32
    model = model.with_bagua([optimizer], spec)
    impl = model.bagua_algorithm
    if lockstep:  # as in fault-tolerant mode: the exchanges on the training thread, each round's end chosen before
        impl.courier = None
    seen_weights, history, sends_at, merges_at, steps_in_round, t = [], [], [], [], 0, 0
    while impl.merged.rounds < rounds:
        t += 1
        assert t < 500, f"rank {rank}: {impl.merged.rounds} of {rounds} rounds merged after {t} steps"
        rounds_before, merged_before = impl.timed.rounds, impl.merged.rounds
        _step(model, optimizer, rank, t, sizes, clock, _cost(costs, rank, t), lockstep)
        steps_in_round += 1
        if heal is not None and impl.timed.rounds == heal[0] and steps_in_round == heal[1]:
            _heal_from_rank_0(model, rank)
        if impl.timed.rounds != rounds_before:
            steps_in_round = 0
            sends_at.append(t)
        if impl.merged.rounds != merged_before:
            seen_weights.append(impl.last_weights)
            merges_at.append(t)
        history.append(_params(model))
    model.bagua_shutdown()
    overlap = options.get("overlap_steps", 0)
    if not lockstep:  # a round merges after the step that sent it: the training thread never waited for it
        assert all(merge > send for send, merge in zip(sends_at, merges_at)), (sends_at, merges_at)
    else:  # exactly overlap_steps after it, waiting there
        assert all(merge == send + overlap for send, merge in zip(sends_at, merges_at)), (sends_at, merges_at)
    reference = _reference(rank, options, costs, sizes, rounds, heal, None if lockstep and not overlap else merges_at,
                           predicted=lockstep)
    assert len(reference) == len(history), (len(reference), len(history))
    for t, (seen, expected) in enumerate(zip(history, reference), 1):
        torch.testing.assert_close(seen, expected, rtol=1e-5, atol=1e-6, msg=lambda m, t=t: f"rank {rank}, step {t}: {m}")
    return seen_weights


def _heal_from_rank_0(model, rank: int) -> None:
    """Rank 2 takes what fault-tolerant mode's heal gives a joiner (``bagua_features.fault_tolerance.state``): rank 0's
    weights, optimizer state and algorithm state less the per-replica keys."""
    from bagua_features.fault_tolerance import state as ft_state

    policy = model.bagua_capabilities.fault_tolerance
    healing = [ft_state.capture(model, policy.heals, per_replica=policy.per_replica_state) if rank == 0 else None]
    dist.broadcast_object_list(healing, 0)
    if rank == 2:
        assert "round_samples" not in healing[0]["algorithm_state"]
        ft_state.restore(model, healing[0], algorithm=False)
        model.bagua_algorithm.load_state_dict(healing[0]["algorithm_state"])


CASES = {  # options, each rank's step costs (repeated), each rank's batch size, rounds
    "diloco, 2 replicas": ({"round_seconds": 6.0}, [[1.0], [2.0]], [8, 12], 3),
    "diloco, 3 replicas, uneven steps": ({"round_seconds": 6.0}, [[1.0, 0.5], [2.0], [3.0]], [16, 8, 12], 3),
    "diloco, 2 replicas, overlap 2": ({"round_seconds": 6.0, "overlap_steps": 2}, [[1.0], [2.0]], [8, 12], 3),
    "diloco+ScaledSign, 2 replicas": ({"round_seconds": 4.0, "compression": "ScaledSign"}, [[0.5], [1.5]],
                                      [16, 16], 3),
    "sparseloco, 2 replicas": ({"name": "sparseloco", "round_seconds": 6.0, "chunk_size": 100, "topk": 7,
                                "error_decay": 0.9, "outer_lr": 0.8}, [[1.0], [2.0]], [8, 12], 3),
    "sparseloco, 3 replicas": ({"name": "sparseloco", "round_seconds": 5.0, "chunk_size": 100, "topk": 7},
                               [[1.0], [2.0], [1.5]], [16, 8, 16], 2),
}


@pytest.mark.parametrize("lockstep", [False, True], ids=["courier", "fault-tolerant lockstep"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_the_reference(case: str, lockstep: bool) -> None:
    options, costs, sizes, rounds = CASES[case]
    weights = run_workers(_run_both, len(costs), options, costs, sizes, rounds, None, lockstep)
    assert all(w == weights[0] for w in weights)  # every replica merged with the same weights
    assert any(abs(w - 1.0) > 1e-3 for w in weights[0][0]), weights[0]  # and they were not all equal


def test_a_replica_healed_mid_round_merges_with_weight_zero() -> None:
    """Three replicas at the same speed, rank 2 healed from rank 0 after step 2 of round 1 (of 3 steps): that
    round's merge is ranks 0 and 1's, weighted by their samples; the next ones count rank 2 again."""
    options, costs, sizes = {"round_seconds": 3.0}, [[1.0]] * 3, [16, 8, 12]
    weights = run_workers(_run_both, 3, options, costs, sizes, 3, (1, 2), True)[0]
    assert weights[1] == pytest.approx([3 * 48 / 72, 3 * 24 / 72, 0.0])  # samples 3 x 16, 3 x 8 and none
    assert weights[0] == weights[2] == pytest.approx([3 * 48 / 108, 3 * 24 / 108, 3 * 36 / 108])


def _equal_samples(rank: int, name: str) -> None:
    """Equal costs and batches, in lockstep: every weight is 1 and the weights equal rounds of ``inner_steps``, bit
    for bit."""
    extra = {"bits": 32, "chunk_size": 100, "topk": 7} if name == "sparseloco" else {}
    runs = []
    for bound in ({"inner_steps": 3}, {"round_seconds": 3.0}):
        clock = _install_clock()
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        model = model.with_bagua([optimizer], {"name": name, **extra, **bound})
        model.bagua_algorithm.courier = None  # lockstep (fault-tolerant mode's)
        history = []
        for t in range(1, 11):
            _step(model, optimizer, rank, t, None, clock, 1.0, lockstep=True)
            history.append(_params(model))
        if "round_seconds" in bound:
            assert model.bagua_algorithm.last_weights == [1.0, 1.0]
        model.bagua_shutdown()
        runs.append(torch.stack(history))
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("name", ["diloco", "sparseloco"])
def test_equal_samples_are_rounds_of_inner_steps_bit_for_bit(name: str) -> None:
    run_workers(_equal_samples, 2, name)


@pytest.mark.parametrize("options,message", [
    ({"name": "diloco", "round_seconds": 10.0, "inner_steps": 25}, "give one of them"),
    ({"name": "diloco", "round_seconds": 10.0, "streaming": True}, "not available with streaming=true"),
    ({"name": "diloco", "round_seconds": 0}, "greater than 0"),
    ({"name": "sparseloco", "round_seconds": 10.0, "inner_steps": 25}, "give one of them"),
    ({"name": "sparseloco", "round_seconds": -1.0}, "greater than 0"),
])
def test_options_are_validated(options: dict, message: str) -> None:
    from bagua_core.runtime.exceptions import BaguaConfigError
    from bagua_core.selection.config import resolve_algorithm

    with pytest.raises(BaguaConfigError, match=message):
        resolve_algorithm(options)


def test_samples_are_the_first_tensors_first_dimension() -> None:
    assert samples_in((torch.zeros(32, 128), torch.zeros(7))) == 32
    assert samples_in(([torch.zeros(5, 2)], {"mask": torch.zeros(9)})) == 5
    assert samples_in(({"ids": torch.zeros(3, 4)},)) == 3
    assert samples_in((torch.tensor(1.0),)) == 1
    assert samples_in(()) == 1  # keyword-only inputs: one per forward
