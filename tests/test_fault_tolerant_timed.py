"""diloco's rounds bounded in time in fault-tolerant mode, where the replicas meet only at the rounds' ends. Three
replicas: a replica that dies is absent from the next merge and one that joins waits for the others' round to end,
is healed there and merges that round with weight 0 (its weights repeat its healer's progress), with its samples
from the next round on; nothing else changes (the survivors' commits go on without a gap longer than the
failure's, every merge's weights sum to the quorum's size). Two replicas, one slower: the fast one takes more inner
steps per round and weighs more in the merge, and both read the data from where the furthest reader got."""

from __future__ import annotations

import json
import time

import pytest

from tests.fault_tolerant_job import Job
from tests.test_fault_tolerant_matrix import GAP_S, START_S, _check_healthy, _pids

ALGORITHM = ["--algorithm", json.dumps({"name": "diloco", "round_seconds": 0.5})]


def _merges(records: list[dict]) -> list[dict]:
    """The committed records of the steps that ended a round (the rounds merged went up)."""
    merges, before = [], None
    for record in records:
        if record["committed"]:
            if before is not None and record["rounds"] > before:
                merges.append(record)
            before = record["rounds"]
    return merges


@pytest.mark.slow
@pytest.mark.timeout(500, func_only=True)
def test_a_replica_that_dies_or_joins_changes_only_the_weights_of_the_next_merge(job: Job) -> None:
    job.start("a", *ALGORITHM)
    job.wait_for("committed a first step", lambda: bool(job.committed("a")), START_S, "a")
    job.start("b", *ALGORITHM, "--die-at", "40")
    job.start("c", *ALGORITHM)
    assert job.wait_exit("b", START_S * 2) == -9, job.output("b")[-3000:]
    job.wait_for("merged twice without b", lambda: len([m for m in _merges(job.records("a")) if m["quorum"] == 2]) >= 2,
                 GAP_S * 4, "a")
    first = _pids(job.records("b"))
    job.start("b", *ALGORITHM)
    restarted = lambda: [p for p in _pids(job.records("b")) if p not in first]  # noqa: E731
    job.wait_for("merged twice after its restart", lambda: bool(restarted()) and len(
        _merges(job.committed("b", pid=restarted()[0]))) >= 2, START_S * 2, "b")
    job.stop()
    for name in ("a", "b", "c"):
        assert job.wait_exit(name, GAP_S) == 0, job.output(name)[-2000:]
    a = _check_healthy(job, "a")
    _check_healthy(job, "c")
    merges = _merges(a)
    assert {m["quorum"] for m in merges} >= {2, 3}, "a merged with b and without it"
    for merge in merges:  # weights w_r = R n_r / N in quorum order: they sum to R
        assert len(merge["round_weights"]) == merge["quorum"] and sum(merge["round_weights"]) == pytest.approx(
            merge["quorum"]), merge

    # b's restart: its first step waits in the quorum for the others' round to end and heals there, in the middle
    # of their round: it merges that round with weight 0, the others' weights by their samples summing to 3
    again = job.committed("b", pid=restarted()[0])
    assert again[0]["healed"] == 1, again[0]
    first_merge = again[0]
    assert first_merge["closed"] and first_merge["quorum"] == 3, first_merge  # it ended the round with the others
    weights, mine = first_merge["round_weights"], first_merge["rank"]
    assert weights[mine] == 0.0 and sum(weights) == pytest.approx(3), first_merge
    later = _merges(again)
    assert later and all(0 < w and sum(m["round_weights"]) == pytest.approx(3) for m in later
                         for w in m["round_weights"]), later
    print(f"b's first merge's weights: {weights}; its next: {later[0]['round_weights']}")


@pytest.mark.slow
@pytest.mark.timeout(300, func_only=True)
def test_a_fast_replica_takes_more_steps_and_the_quorum_is_joined_per_round(job: Job) -> None:
    """a steps every 10 ms, b every 40 ms: per-step quorums would hold a to b's pace."""
    algorithm = ["--algorithm", json.dumps({"name": "diloco", "round_seconds": 0.6})]
    job.start("a", *algorithm, step_delay_s=0.01)
    job.wait_for("committed a first round", lambda: bool(job.committed("a")), START_S, "a")
    job.start("b", *algorithm, step_delay_s=0.04)
    together = lambda name: [m for m in _merges(job.records(name)) if m["quorum"] == 2]  # noqa: E731
    job.wait_for("merged 6 rounds together", lambda: len(together("a")) >= 6 and len(together("b")) >= 6,
                 START_S, "a")
    job.stop()
    for name in ("a", "b"):
        assert job.wait_exit(name, GAP_S) == 0, job.output(name)[-2000:]
    steps = {}
    for name in ("a", "b"):
        records = job.records(name)
        merges = [m for m in _merges(records) if m["quorum"] == 2][1:]  # (the first may hold a's steps alone)
        ends = [i for i, r in enumerate(records) if r in merges]
        steps[name] = sorted(b - a for a, b in zip(ends, ends[1:]))  # inner steps per round, the merge's included
        # a quorum per round: every step between two merges stands inside the round, no transaction closed
        for i, j in zip(ends, ends[1:]):
            assert not any(r["closed"] for r in records[i + 1:j]), records[i + 1:j + 1]
    fast, slow = steps["a"][len(steps["a"]) // 2], steps["b"][len(steps["b"]) // 2]
    print(f"inner steps per round, median: a {fast}, b {slow}; a's steps {steps['a']}, b's {steps['b']}")
    assert fast >= 1.5 * slow, steps
    # the merges weigh a more (it trained on more samples), and both replicas go on from one data position
    a = {m["rounds"]: m for m in _merges(job.records("a")) if m["quorum"] == 2}
    b = {m["rounds"]: m for m in _merges(job.records("b")) if m["quorum"] == 2}
    common = sorted(set(a) & set(b))[1:]
    assert len(common) >= 4, (sorted(a), sorted(b))
    for rounds in common:
        weights, mine = a[rounds]["round_weights"], a[rounds]["rank"]
        assert weights == b[rounds]["round_weights"] and weights[mine] > weights[1 - mine], (a[rounds], b[rounds])
        assert a[rounds]["position"] == b[rounds]["position"], (a[rounds], b[rounds])


@pytest.mark.slow
@pytest.mark.timeout(300, func_only=True)
def test_a_replica_whose_loop_ends_sooner_leaves_and_the_other_trains_on(job: Job, tmp_path) -> None:
    """a's loop ends (its own stop file) in the middle of a round of b's, after they merged together: a exits
    cleanly, and b's next round merges alone once the lighthouse has stopped counting a (its heartbeat timeout);
    b trains on and ends cleanly too."""
    algorithm = ["--algorithm", json.dumps({"name": "diloco", "round_seconds": 0.4})]
    stop_a = tmp_path / "stop_a"
    job.start("a", *algorithm, "--stop", str(stop_a))  # (the last --stop is a's)
    job.wait_for("committed a first round", lambda: bool(job.committed("a")), START_S, "a")
    job.start("b", *algorithm)
    together = lambda: [m for m in _merges(job.records("b")) if m["quorum"] == 2]  # noqa: E731
    job.wait_for("merged twice with a", lambda: len(together()) >= 2, START_S, "b")
    stop_a.write_text("stop")
    assert job.wait_exit("a", GAP_S) == 0, job.output("a")[-2000:]
    left = time.time()
    alone = lambda: [m for m in _merges(job.records("b")) if m["quorum"] == 1 and m["t"] > left]  # noqa: E731
    job.wait_for("merged twice alone", lambda: len(alone()) >= 2, GAP_S * 2, "b")
    job.stop()
    assert job.wait_exit("b", GAP_S) == 0, job.output("b")[-2000:]
    merges = _merges(job.records("b"))
    gaps = [y["t"] - x["t"] for x, y in zip(merges, merges[1:])]
    print(f"b's gaps between merges: {[round(g, 2) for g in gaps]} s")
    assert max(gaps) < GAP_S, gaps
