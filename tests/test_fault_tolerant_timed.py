"""diloco's rounds bounded in time in fault-tolerant mode, three replicas: a replica that dies is absent from the
next merge and one that joins merges with weight 0 in the round it was healed in (its weights repeat its healer's
progress), with its samples from the next round on; nothing else changes (the survivors' commits go on without a
gap longer than the failure's, every merge's weights sum to the quorum's size). The replicas train at one speed
on batches of one size, so every other merge weighs each replica 1."""

from __future__ import annotations

import json

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

    # b's restart: it heals from a live replica at its first step; in the middle of a round -> weight 0 there
    again = job.committed("b", pid=restarted()[0])
    assert again[0]["healed"] == 1, again[0]
    before = next(r for r in reversed(a) if r["committed"] and r["step"] == again[0]["step"] - 1)
    mid_round = before["round_steps"] > 0  # a's round, as b took it from its healer
    joined = _merges(again)
    if again[0]["rounds"] > before["rounds"]:  # its first step ended the round it was healed in
        joined = [again[0]] + joined
    first_merge, later = joined[0], joined[1:]
    weights, mine = first_merge["round_weights"], first_merge["rank"]
    if mid_round:
        assert weights[mine] == 0.0, first_merge
        assert all(w == pytest.approx(3 / 2) for i, w in enumerate(weights) if i != mine), first_merge
    else:
        assert weights == [1.0] * 3, first_merge
    assert later and all(m["round_weights"] == [1.0] * m["quorum"] for m in later), later
    print(f"b healed {'in the middle of' if mid_round else 'at the start of'} a round; its first merge's weights: "
          f"{weights}")
    # a's merges: weight 1 each, but for the replicas that joined in the round merged (0, the others R/(R-k))
    joins, quorum = 0, 1
    for record in (r for r in a if r["committed"]):
        joins += max(0, record["quorum"] - quorum)
        quorum = record["quorum"]
        if record in merges:
            weights = record["round_weights"]
            zeros = weights.count(0.0)
            assert zeros <= joins, (record["step"], joins, weights)
            assert all(w == pytest.approx(len(weights) / (len(weights) - zeros)) for w in weights if w), weights
            joins = 0
