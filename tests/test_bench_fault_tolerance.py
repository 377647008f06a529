"""The pure parts of benchmarks/fault_tolerance.py: the kill and fault schedules, the analysis of synthetic records
(efficiency, kill to first commit, bytes healed, the stall per fault kind, the fail-fast baseline's kept progress) and the report
writer. The benchmark itself needs root and minutes; nothing here is timed."""

from __future__ import annotations

import json

import pytest

from benchmarks import fault_tolerance as ft


def test_kill_schedule_round_robin_strictly_inside_the_window() -> None:
    assert ft.kill_schedule(60, 300) == [(60, 0), (120, 1), (180, 2), (240, 0)]
    schedule = ft.kill_schedule(15, 300)
    assert len(schedule) == 19 and schedule[-1] == (285, 18 % 3)
    assert [victim for _, victim in schedule[:4]] == [0, 1, 2, 0]
    assert ft.kill_schedule(0, 300) == []


def test_kill_schedule_seeded_is_reproducible_and_never_repeats_a_victim() -> None:
    a, b = ft.kill_schedule(15, 300, seed=3), ft.kill_schedule(15, 300, seed=3)
    assert a == b
    victims = [v for _, v in a]
    assert all(x != y for x, y in zip(victims, victims[1:]))
    assert set(victims) <= {0, 1, 2}


def test_fault_schedule_keeps_the_kill_schedule_and_draws_the_kinds() -> None:
    kinds = ("kill", "stop", "partition")
    assert ft.fault_schedule(15, 100, kinds) == [(15, 0, "kill"), (30, 1, "stop"), (45, 2, "partition"),
                                                 (60, 0, "kill"), (75, 1, "stop"), (90, 2, "partition")]
    seeded = ft.fault_schedule(15, 600, kinds, seed=0)
    assert seeded == ft.fault_schedule(15, 600, kinds, seed=0)
    assert [(t, v) for t, v, _ in seeded] == ft.kill_schedule(15, 600, seed=0)  # the same victims, whatever the kinds
    assert len(seeded) == 39 and {k for _, _, k in seeded} == set(kinds)
    assert {k for _, _, k in ft.fault_schedule(15, 600, ("stop",), seed=0)} == {"stop"}
    with pytest.raises(ValueError, match="fault kinds must be some of kill, stop, partition"):
        ft.fault_schedule(15, 100, ("kill", "reboot"))


def test_stalls_are_charged_to_the_fault_before_them_by_kind() -> None:
    records = _ft_records(10, 100, stall=(20, 21.2))  # a kill's 1.2 s
    for start, end in ((40, 43), (60, 70)):  # a stop's 3 s, a partition's 10 s (a collective's timeout)
        for rs in records.values():
            rs[:] = [r for r in rs if not start <= r["t"] - 1000 < end]
    faults = [{"t": 1020.0, "host": "h2", "pid": 1, "kind": "kill", "done": True, "killed": True},
              {"t": 1039.9, "kind": "stop", "done": True},
              {"t": 1050.0, "kind": "stop", "done": True},  # it cost nothing
              {"t": 1059.95, "kind": "partition", "done": True},
              {"t": 1080.0, "host": "h3", "pid": 1, "kind": "kill", "done": False, "killed": False}]  # not injected: not counted
    by = ft.stalls_by_fault(records, faults, 1000.0, 100)
    assert set(by) == {"kill", "stop", "partition"}
    assert by["kill"]["faults"] == 1 and by["kill"]["median_s"] == pytest.approx(1.2, abs=0.15)
    assert by["stop"]["faults"] == 2 and by["stop"]["max_s"] == pytest.approx(3.0, abs=0.15)
    assert by["stop"]["median_s"] == pytest.approx(1.5, abs=0.1) and by["stop"]["total_s"] == pytest.approx(3.0, abs=0.15)
    assert by["partition"]["median_s"] == pytest.approx(10.0, abs=0.15)
    result = ft.analyse_run(records, {}, faults, 1000.0, 100, 10.0)
    assert result["kills"] == 1 and result["kills_missed"] == 1  # the kills alone
    assert result["faults"] == {"kill": 1, "partition": 1, "stop": 2} and result["faults_missed"] == 1
    assert result["stalls_by_fault"] == by
    assert [kind for _, kind in result["fault_times"]] == ["kill", "stop", "stop", "partition"]
    assert "stop 2 1.5 / 3.0" in ft.markdown_table({"cells": {"gradient_allreduce@15s": {"ft": result}}})
    assert "absence_bound" not in result  # the stops' and the partition's ends were not recorded


def test_the_absence_bound_counts_each_faulted_replica_out_until_it_is_back() -> None:
    """3 replicas for 100 s: a stop of 3 s, a partition of 4 s, a kill whose replacement commits 2 s later, a
    kill never replaced (out to the window's end, 10 s), a fault not injected: (3 + 4 + 2 + 10) / 300 out."""
    records = _ft_records(10, 100)
    records["h2"] = [r for r in records["h2"] if r["t"] < 1060] + [
        {"t": 1062.0, "pid": 2, "step": 700, "committed": True, "quorum": 3, "healed": 1, "healed_bytes": 1}]
    records["h3"] = [r for r in records["h3"] if r["t"] < 1090]
    starts = {"h2": [{"pid": 2, "started": 1050.0, "activated": 1060.5}]}
    faults = [{"t": 1010.0, "kind": "stop", "done": True, "ended": 1013.0},
              {"t": 1030.0, "kind": "partition", "done": True, "ended": 1034.0},
              {"t": 1045.0, "kind": "stop", "done": False},
              {"t": 1060.0, "host": "h2", "pid": 1, "kind": "kill", "done": True, "killed": True},
              {"t": 1090.0, "host": "h3", "pid": 1, "kind": "kill", "done": True, "killed": True}]
    result = ft.analyse_run(records, starts, faults, 1000.0, 100, 10.0)
    assert result["kill_to_first_commit_s"] == {"median": 2.0, "max": 2.0}
    assert result["absence_bound"] == pytest.approx(1 - 19 / 300, abs=1e-4)
    assert f"| {100 * (1 - 19 / 300):.1f}% |" in ft.markdown_table({"cells": {"gradient_allreduce@15s": {"ft": result}}})


def _ft_records(rate: float, seconds: float, stall: tuple[float, float] | None = None, t0: float = 1000.0):
    """Three replicas committing ``rate`` steps/s from t0, none during ``stall`` (start, end offsets)."""
    records = {"h1": [], "h2": [], "h3": []}
    step, t = 0, t0
    while t <= t0 + seconds:
        if not (stall and stall[0] <= t - t0 < stall[1]):
            step += 1
            for name in records:
                records[name].append({"t": t, "pid": 1, "step": step, "committed": True, "quorum": 3,
                                      "healed": 0, "healed_bytes": 0})
        t = round(t + 1 / rate, 6)
    return records


def test_fault_free_rate_and_full_efficiency() -> None:
    records = _ft_records(10, 100)
    curve = ft.ft_progress(records)
    assert ft.window_start(records) == 1000.0
    rate = ft.fault_free_rate(curve, 1000.0, 50)
    assert rate == pytest.approx(10, rel=0.01)
    result = ft.analyse_run(records, {}, [], 1000.0, 100, rate)
    assert result["efficiency"] == pytest.approx(1.0, abs=0.01)
    assert result["sample_efficiency"] == pytest.approx(1.0, abs=0.01)
    assert result["kills"] == 0 and result["restarts_measured"] == 0


def test_a_stall_lowers_efficiency_and_the_restart_is_measured() -> None:
    records = _ft_records(10, 100, stall=(20, 30))  # ten seconds without a commit out of 100
    # the killed replica h2 (pid 1) restarts as pid 2: started at 1021, first commit at 1030 after a heal
    records["h2"] = [r for r in records["h2"] if r["t"] < 1020] + [
        {"t": 1030.0, "pid": 2, "step": 200, "committed": True, "quorum": 3, "healed": 1, "healed_bytes": 4_000_000}]
    starts = {"h2": [{"pid": 1, "started": 990.0, "imported": 991, "initialized": 992, "wrapped": 993},
                     {"pid": 2, "started": 1021.0, "imported": 1023.0, "initialized": 1023.5, "wrapped": 1025.0}]}
    kills = [{"t": 1020.0, "host": "h2", "pid": 1, "killed": True}, {"t": 1060.0, "host": "h3", "pid": 1,
                                                                     "killed": False}]
    result = ft.analyse_run(records, starts, kills, 1000.0, 100, 10.0)
    assert result["efficiency"] == pytest.approx(0.9, abs=0.02)
    assert result["kills"] == 1 and result["kills_missed"] == 1
    assert result["kill_to_first_commit_s"] == {"median": 10.0, "max": 10.0}
    assert result["start_to_first_commit_s"] == {"median": 9.0, "max": 9.0}
    assert result["restart_breakdown_median_s"] == {"launcher": 1.0, "imports": 2.0, "process_group": 0.5,
                                                    "wrap": 1.5, "join": 5.0}
    assert result["bytes_per_heal"] == 4_000_000
    assert result["kill_times"] == [20.0]
    # the stall, read from the committed steps alone: one gap of ~10 s beyond the 0.1 s step
    assert result["stalls"] == 1 and result["stall_s"] == pytest.approx(10.0, abs=0.15)
    assert result["median_step_s"] == pytest.approx(0.1) and result["quorum_share"] == 1.0
    assert result["load_free_efficiency"] == pytest.approx(0.9, abs=0.01)


def test_load_free_efficiency_counts_the_quorum_share() -> None:
    records = _ft_records(10, 10)
    for r in records["h1"][:50]:
        r["quorum"] = 2
    for name in ("h2", "h3"):
        for r in records[name][:50]:
            r["quorum"] = 2
    figures = ft.stall_figures(records, 1000.0, 10)
    assert figures["stalls"] == 0 and figures["quorum_share"] == pytest.approx((50 * 2 + 50 * 3) / (3 * 100), abs=0.01)
    assert figures["load_free_efficiency"] == pytest.approx(figures["quorum_share"])


def test_reanalyse_recomputes_the_stalls_from_the_logs(tmp_path) -> None:
    records = _ft_records(10, 30, stall=(10, 14))
    run = tmp_path / "work" / "bytegrad_ft_15"
    run.mkdir(parents=True)
    for name, rs in records.items():
        (run / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rs))
    out = tmp_path / "out"
    ft.write_report({"setup": {"duration_s": 30}, "cells": {"bytegrad@15s": {"ft": {"efficiency": 0.5}}}}, out)
    assert ft.main(["--reanalyse", "--out", str(out), "--work", str(tmp_path / "work")]) == 0
    cell = json.loads((out / "fault_tolerance.json").read_text())["cells"]["bytegrad@15s"]["ft"]
    assert cell["efficiency"] == 0.5 and cell["stalls"] == 1 and cell["stall_s"] == pytest.approx(4.0, abs=0.15)


def test_sample_efficiency_weighs_steps_by_their_quorum() -> None:
    records = _ft_records(10, 10)
    for rs in records.values():
        for r in rs:
            r["quorum"] = 2
    result = ft.analyse_run(records, {}, [], 1000.0, 10, 10.0)
    assert result["efficiency"] == pytest.approx(1.0, abs=0.02)
    assert result["sample_efficiency"] == pytest.approx(2 / 3, abs=0.02)


def test_failfast_progress_falls_back_to_the_checkpoint_and_counts_redone_steps_once() -> None:
    # steps 1..30 at 1 step/s, a checkpoint every 10; a kill at 25.5 s; the restart resumes at 21 from 45 s
    records = {"h1": []}
    for step in range(1, 26):
        records["h1"].append({"t": float(step), "pid": 1, "step": step, "checkpoint": step % 10 == 0})
    for i, step in enumerate(range(21, 41)):
        records["h1"].append({"t": 45.0 + i, "pid": 2, "step": step, "checkpoint": step % 10 == 0})
    kills = [{"t": 25.5, "host": "h1", "pid": 1, "killed": True}]
    curve = ft.failfast_progress(records, kills)
    assert ft.value_at(curve, 25.0) == 25
    assert ft.value_at(curve, 30.0) == 20       # the 5 steps after the checkpoint are lost
    assert ft.value_at(curve, 50.0) == 26       # redone, counted once
    assert ft.value_at(curve, 64.0) == 40
    result = ft.analyse_run(records, {"h1": [{"pid": 2, "started": 30.0, "imported": 33.0, "initialized": 34.0,
                                              "wrapped": 40.0}]}, kills, 0.0, 64, 1.0, mode="failfast")
    assert result["committed_steps"] == 40 and result["efficiency"] == pytest.approx(40 / 64, abs=0.01)
    assert result["kill_to_first_commit_s"]["median"] == pytest.approx(19.5)


def test_failfast_ignores_a_step_finishing_as_the_kill_lands() -> None:
    records = {"h1": [{"t": 1.0, "pid": 1, "step": 1, "checkpoint": True}],
               "h2": [{"t": 1.0, "pid": 5, "step": 1, "checkpoint": True}, {"t": 2.2, "pid": 5, "step": 2}]}
    curve = ft.failfast_progress(records, [{"t": 2.0, "host": "h1", "pid": 1, "killed": True}])
    assert ft.value_at(curve, 3.0) == 1


def test_read_records_skips_a_line_cut_by_a_kill(tmp_path) -> None:
    path = tmp_path / "h1.jsonl"
    path.write_text(json.dumps({"event": "start", "pid": 1, "started": 1.0}) + "\n" +
                    json.dumps({"t": 2.0, "pid": 1, "step": 1, "committed": True}) + "\n" + '{"t": 3.0, "pi')
    steps, starts = ft.read_records(path)
    assert len(steps) == 1 and len(starts) == 1 and steps[0]["step"] == 1
    assert ft.read_records(tmp_path / "absent.jsonl") == ([], [])


def test_write_report_table_json_and_plot(tmp_path) -> None:
    records = _ft_records(10, 60, stall=(20, 25))
    cell = ft.analyse_run(records, {}, [{"t": 1020.0, "host": "h1", "pid": 1, "killed": True}], 1000.0, 60, 10.0)
    base = ft.analyse_run(records, {}, [], 1000.0, 60, 12.0)
    results = {"date": "2026-11-24 12:00", "setup": {"description": "synthetic", "duration_s": 60},
               "cells": {"gradient_allreduce@15s": {"ft": cell, "baseline": base},
                         "bytegrad@60s": {"ft": cell}},
               "fault_free": {"gradient_allreduce/ft": {"rate": 10.0, "seconds": 30}}}
    notes = ft.write_report(results, tmp_path)
    table = (tmp_path / "fault_tolerance.md").read_text()
    assert "| gradient_allreduce | 15s | 91.7% |" in table.replace("91.6%", "91.7%")
    assert "| bytegrad | 60s |" in table and "not run" in table
    assert table.index("| gradient_allreduce |") < table.index("| bytegrad |")  # the order of ft.ALGORITHMS
    assert json.loads((tmp_path / "fault_tolerance.json").read_text())["cells"].keys() == results["cells"].keys()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert notes and "matplotlib" in notes[0]
    else:
        assert (tmp_path / "fault_tolerance.png").stat().st_size > 1000 and not notes


def test_thin_curve_keeps_drops_and_the_last_point() -> None:
    curve = [(i * 0.1, i) for i in range(20)] + [(2.05, 5), (2.1, 6)]
    thin = ft.thin_curve(curve, min_dt=0.5)
    assert thin[0] == (0.0, 0) and thin[-1] == (2.1, 6) and (2.05, 5) in thin
    assert all(b[0] - a[0] >= 0.5 - 1e-9 or b[1] < a[1] or b == thin[-1] for a, b in zip(thin, thin[1:]))
    assert len(thin) < len(curve) / 2
