"""What ``bagua run --fault-tolerant`` counts and says: the replicas' reports (one JSON line each, appended
by several processes) read back whole, a line per failure, restart and heal, and a summary that counts
each failure once, whether its replica's launcher reported it or only its exit status shows it."""

from __future__ import annotations

import json

from bagua_cli.fault_tolerant_report import JobReport
from bagua_features.fault_tolerance import events


def test_reports_are_appended_and_read_back_whole(tmp_path, monkeypatch) -> None:
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv(events.EVENTS_ENV, str(path))
    monkeypatch.setenv("BAGUA_FT_REPLICA_INDEX", "1")
    events.report("restarted", restart=1, max_restarts=2)
    events.report("healed", step=57, bytes=1000, seconds=0.5)
    with open(path, "a") as fh:
        fh.write(json.dumps({"event": "failed", "replica": 0}))  # a line still being written: not read yet
    read, offset = events.read_new(str(path), 0)
    assert [(e["event"], e["replica"]) for e in read] == [("restarted", 1), ("healed", 1)]
    assert read[1]["step"] == 57
    with open(path, "a") as fh:
        fh.write("\n")
    more, _ = events.read_new(str(path), offset)
    assert [e["event"] for e in more] == ["failed"]
    monkeypatch.delenv(events.EVENTS_ENV)
    events.report("healed", step=1)  # outside a fault-tolerant job: nothing written, nothing raised
    assert events.read_new(str(path), 0)[0] == read + more


def test_a_failure_its_restart_and_its_heal_each_get_a_line_and_are_counted() -> None:
    report = JobReport(replicas=2)
    lines = [report.on_event({"event": "healed", "replica": 1, "step": 0, "bytes": 10, "seconds": 0.1}),
             report.on_event({"event": "failed", "replica": 1, "cause": "a worker exited", "restarts_left": 1}),
             report.on_event({"event": "restarted", "replica": 1, "restart": 1, "max_restarts": 1}),
             report.on_event({"event": "healed", "replica": 1, "step": 57, "bytes": 421_000, "seconds": 0.31})]
    assert lines == [None,  # replicas starting together take the first one's weights at step 0: not a heal
                     "bagua: replica 1 failed: a worker exited",
                     "bagua: replica 1 restarted (restart 1 of 1)",
                     "bagua: replica 1 healed from a live peer at step 57 (0.4 MB in 0.3 s)"]
    assert report.on_event({"event": "healed", "replica": 0, "step": 9, "bytes": 11_048, "seconds": 0.012}) == \
        "bagua: replica 0 healed from a live peer at step 9 (11 kB in 12 ms)"
    assert report.on_exit(0, 0, others_running=True) is None
    assert report.on_exit(1, 0, others_running=False) is None
    assert report.summary() == "bagua: fault tolerance: 1 replica failure, 1 restart, 2 heals; 2 of 2 replicas finished"


def test_a_replica_out_of_restarts_is_counted_once() -> None:
    report = JobReport(replicas=3)
    # replica 1's launcher printed its failure (with torchrun's exit code) and reported it
    assert report.on_event({"event": "failed", "replica": 1, "cause": "rank 0 (exit code -9): Signal 9",
                            "restarts_left": 0, "final": True}) is None
    assert report.on_exit(1, 1, others_running=True) == \
        "bagua: replica 1 ended with exit status 1 (out of restarts: --max-restarts); the others train on"
    # replica 2's launcher was killed itself: only its exit status tells
    assert report.on_exit(2, -9, others_running=True).startswith("bagua: replica 2 ended with exit status -9")
    assert report.on_exit(0, 0, others_running=False) is None
    assert report.summary() == ("bagua: fault tolerance: 2 replica failures, 0 restarts, 0 heals; 1 of 3 replicas "
                                "finished (replica 1 ended failed, replica 2 ended failed)")
