"""Every exchange of diloco (streaming or not, overlapped, with rounds bounded in time, in fault-tolerant mode's
lockstep) and sparseloco is counted once (``bagua_core.runtime.communication.stats``), in the step that sent it.

Each rank wraps torch.distributed's collective functions, logging what each call is handed (on whichever thread:
the courier's too), and runs every case several times, 14 steps each: per step, the bytes counted (read right after
``optimizer.step()``) and the metrics' ``step/bytes`` equal the messages sent in that step (the schedule's
fragments, their sizes from the codec; a timed round adds the allgather of the weights), and after the shutdown
the counts per collective (calls and bytes) equal what the collectives were handed: none missed, none counted
twice. An exchange on the courier used to be counted there when the thread ran it, after its step's count was read
(or wiped by a per-step ``reset()``), so a step's bytes landed in a later step or nowhere. In a real fault-tolerant
job (slow) the counts equal what the collectives were handed at every step's end of both replicas."""

from __future__ import annotations

import json
import time

import pytest
import torch
import torch.nn.functional as F

from tests.distributed import run_workers
from tests.fault_tolerant_replica import HandedBytes
from tests.models import SmallNet, batch

STEPS = 14
RUNS = 5
CASES = {
    "streaming, overlap 1": {"name": "diloco", "streaming": True, "inner_steps": 4, "fragments": 2,
                             "overlap_steps": 1},
    "streaming+MinMaxUInt4": {"name": "diloco", "streaming": True, "inner_steps": 4, "fragments": 2,
                              "overlap_steps": 1, "compression": "MinMaxUInt4"},
    "diloco": {"name": "diloco", "inner_steps": 3},
    "diloco, overlap 1, eager": {"name": "diloco", "inner_steps": 3, "overlap_steps": 1, "eager": True},
    "diloco timed": {"name": "diloco", "round_seconds": 0.33},
    "diloco timed+ScaledSign, overlap 1": {"name": "diloco", "round_seconds": 0.33, "overlap_steps": 1,
                                           "compression": "ScaledSign"},
    "sparseloco, overlap 1": {"name": "sparseloco", "inner_steps": 3, "overlap_steps": 1, "chunk_size": 64,
                              "topk": 8},
    "sparseloco timed": {"name": "sparseloco", "round_seconds": 0.33, "chunk_size": 64, "topk": 8},
}


def _message_bytes(impl, fragment: int, options: dict) -> int:
    """What one exchange of ``fragment`` hands over: fp32, or the codec's message."""
    numel = impl.starts[fragment].numel()
    if options["name"] == "sparseloco":
        return impl.exchanges[fragment].codec.nbytes
    if options.get("compression"):
        from bagua_core.codecs import get_codec

        return get_codec(options["compression"]).encoded_size(numel, 1)
    return 4 * numel


def _expected(impl, options: dict, t: int, rounds_before: int) -> int:
    """The bytes of the messages this rank sent in inner step ``t``."""
    if options.get("round_seconds") is not None:  # a round ended (and was sent) in this step
        return (_message_bytes(impl, 0, options) + 16) * (impl.timed.rounds - rounds_before)
    H, count = options["inner_steps"], options.get("fragments", 1)
    return sum(_message_bytes(impl, p, options) for p in range(count) if (t + p * H // count) % H == 0)


def _one_run(rank: int, options: dict, seed: int, lockstep: bool, clock) -> str | None:
    from bagua_core.runtime.communication import stats

    model = SmallNet(seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], dict(options))
    impl = model.bagua_algorithm
    if lockstep:  # fault-tolerant mode's: every exchange on the training thread, each timed round's end chosen before
        impl.courier = None
    metrics = model.bagua_metrics()
    handed = HandedBytes()
    stats.reset()
    counted, expected = [], []
    clock.now = 0.0  # (the same float sums on both ranks: in lockstep they end the same rounds)
    try:
        for t in range(1, STEPS + 1):
            rounds_before = impl.timed.rounds if impl.timed is not None else 0
            if lockstep and impl.timed is not None:
                impl.round_syncs(model)
            x, y = batch(rank, 1000 * seed + t)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            # rank 1's steps cost twice rank 0's (timed rounds of unequal steps); in lockstep, as in a quorum, the
            # replicas end the same rounds at the same steps
            clock.now += 0.1 if lockstep else 0.1 * (1 + rank)
            loss.backward()
            before = sum(counted)
            optimizer.step()
            counted.append(stats.total_bytes() - before)
            expected.append(_expected(impl, options, t, rounds_before))
            time.sleep(0.002)  # (a step's own compute: the courier runs meanwhile)
        metrics.flush()
        step_bytes = [record.bytes for record in metrics.steps]
        model.bagua_shutdown()
    finally:
        handed.restore()
    where = f"rank {rank}, {options}, seed {seed}{', lockstep' if lockstep else ''}"
    if sum(expected) == 0:
        return f"{where}: nothing was sent in {STEPS} steps"
    if counted != expected:
        return f"{where}: counted per step {counted}, sent {expected}"
    if step_bytes != expected:
        return f"{where}: step/bytes {step_bytes}, sent {expected}"
    snapshot, seen = stats.snapshot(), handed.by_collective()
    if snapshot != seen:
        return f"{where}: counted {snapshot}, the collectives were handed {seen}"
    if not lockstep and impl.courier is not None and all(thread == "MainThread" for *_, thread in handed.calls):
        return f"{where}: no collective ran on the courier's thread"
    return None


def _every_case(rank: int) -> list[str]:
    from bagua_algorithms.diloco import timed

    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    timed.clock = clock
    failures = []
    for case, options in CASES.items():
        for lockstep in (False, True) if options["name"] == "diloco" and "round_seconds" in options else (False,):
            for seed in range(RUNS):
                failure = _one_run(rank, options, seed, lockstep, clock)
                if failure is not None:
                    failures.append(f"{case}: {failure}")
    return failures


@pytest.mark.timeout(150)
def test_every_exchange_is_counted_once_in_the_step_that_sent_it() -> None:
    failures = [f for per_rank in run_workers(_every_case, 2, timeout=120) for f in per_rank]
    assert not failures, "\n".join(failures)


FAULT_TOLERANT = {  # an exchange in flight across steps (sent again on the quorum's new group), timed sparse rounds
    "diloco_streaming": {"name": "diloco", "streaming": True, "inner_steps": 4, "fragments": 2},
    "sparseloco_timed": {"name": "sparseloco", "round_seconds": 0.2, "chunk_size": 64, "topk": 8},
}


@pytest.mark.slow
@pytest.mark.timeout(300, func_only=True)
@pytest.mark.parametrize("algorithm", sorted(FAULT_TOLERANT))
def test_fault_tolerant_mode_counts_what_its_collectives_were_handed(job, algorithm: str) -> None:
    """A replica trains alone, a second joins (healed from it) and both go on in a quorum of two: at every step's
    end each replica's counts per collective equal what torch.distributed's collectives were handed (the quorum's
    agreement on the data position at each round's end included)."""
    from tests.test_fault_tolerant_matrix import GAP_S, START_S

    args = ["--algorithm", json.dumps(FAULT_TOLERANT[algorithm]), "--count-bytes"]
    job.start("a", *args)
    job.wait_for("committed 3 steps alone", lambda: len(job.committed("a")) >= 3, START_S, "a")
    job.start("c", *args)
    job.wait_for("committed 8 steps with a", lambda: len(job.committed("c", quorum=2)) >= 8, START_S, "c")
    job.stop()
    for name in ("a", "c"):
        assert job.wait_exit(name, GAP_S) == 0, job.output(name)[-2000:]
        records = job.records(name)
        differ = [r for r in records if r["bytes"]["counted"] != r["bytes"]["handed"]]
        assert not differ, f"replica {name!r}: {len(differ)} of {len(records)} steps counted otherwise than handed: " \
                           f"{differ[:2]}"
        together = [r for r in records if r["quorum"] == 2]
        assert together and together[-1]["bytes"]["handed"], f"replica {name!r} handed nothing in a quorum of two"
