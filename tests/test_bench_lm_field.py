"""The LM benchmark against the field: torchft's DiLoCo as a peer, the zero-communication limit, seeds and a
slow host. The runs are smoke runs on loopback (no root, a tiny model, seconds per method, never timed); the
limit's and the seeds' arithmetic is checked on hand-made curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.lm_report import lm_markdown
from benchmarks.lm_summary import host_throughputs, summarize
from benchmarks.lm_torchft import TorchftDiLoCoOptions
from benchmarks.lm_worker import LM_METHOD_OPTIONS, merges_in_rounds, steps_independently
from benchmarks.slow_host import SlowHost, plan_cores

SMOKE = ["--loopback", "--networks", "loopback", "--model", "lm-tiny", "--budget", "2", "--evals", "3",
         "--corpus-bytes", "300000", "--target", "4.5"]


def test_torchft_streaming_diloco_runs_as_a_peer(tmp_path: Path) -> None:
    """Streaming (4 fragments) covers DiLoCo's path too (one fragment: the whole model)."""
    from benchmarks import lm

    rows = lm.main([*SMOKE, "--methods", "torchft_diloco_streaming", "--results", str(tmp_path)])
    assert [r["method"] for r in rows] == ["torchft_diloco_streaming"]
    for row in rows:
        assert "error" not in row, row.get("log")
        assert row["algorithm"] == "torchft_diloco" and row["peer"]
        assert row["curve"][-1]["loss"] < row["curve"][0]["loss"]  # it learns
        # torchft's Manager committed an exchange every inner_steps / fragments steps
        every = row["options"]["inner_steps"] // row["options"].get("fragments", 1)
        assert row["torchft_commits"] == row["steps"] // every > 0, row
    assert "| torchft_diloco_streaming |" in (tmp_path / "lm.md").read_text()


def test_a_slow_host_runs_beside_equal_speeds(tmp_path: Path) -> None:
    from benchmarks import lm

    rows = lm.main([*SMOKE, "--methods", "alone", "--slow-host", "1:0.5", "--results", str(tmp_path)])
    assert [(r["method"], r["slow_host"]) for r in rows] == [("alone", [1, 1.0]), ("alone", [1, 0.5])]
    for row in rows:
        assert "error" not in row, row.get("log")
        assert "pinned" in row["pace"]
        added = row["slow_added_s"]
        if row["slow_host"][1] == 1.0:
            assert added == [0.0, 0.0]
        else:  # host 1 alone took extra time, inside its training clock
            assert added[0] == 0.0 and 0 < added[1] < row["rank_clocks"][1]
    alone = rows[1]
    assert alone["independent_steps"] and len(alone["rank_steps"]) == 2
    table = (tmp_path / "lm_slow_host.md").read_text()
    assert "host 1 at 0.5 speed" in table and "time with the slow host / equal" in table and "| alone |" in table


def _run(method: str, seed: int, seconds: list[float], losses: list[float], **extra) -> dict:
    curve = [{"seconds": s, "step": 10 * i, "samples": 80 * i, "loss": loss}
             for i, (s, loss) in enumerate(zip(seconds, losses))]
    return {"method": method, "network": "n", "seed": seed, "curve": curve, "world_size": 2, "batch_size": 4,
            "budget_s": seconds[-1], "steps": curve[-1]["step"], "tx_bytes": 0, "iface": "eth0", "model": "m",
            "params": 1, "seq_len": 8, **extra}


def test_the_limit_is_synchronous_samples_at_the_throughput_alone_and_seeds_give_median_and_spread() -> None:
    rows = []
    for seed, ddp_s, x_s in [(0, 40.0, 10.0), (1, 60.0, 14.0), (2, 50.0, 30.0)]:
        # ddp reaches 2.5 after 160 samples (step 20) in every seed; x after 80 samples
        rows.append(_run("ddp", seed, [0, ddp_s / 2, ddp_s], [5.0, 3.0, 2.5]))
        rows.append(_run("x", seed, [0, x_s, 2 * x_s], [5.0, 2.5, 2.0]))
        # alone: 2 hosts of 1 rank, each 40 steps of 4 samples in 4 s: 80 samples/s together
        rows.append(_run("alone", seed, [0, 2, 4], [5.0, 4.0, 3.5], rank_steps=[40, 40], rank_clocks=[4.0, 4.0]))
    summary = {r["method"]: r for r in summarize(rows, 2.5)}
    x = summary["x"]
    assert x["seeds"] == [0, 1, 2] and x["seconds_to_target"] == 14.0 and x["seconds_range"] == (10.0, 30.0)
    assert summary["ddp"]["seconds_to_target"] == 50.0
    assert x["limit_s"] == pytest.approx(160 / 80) and x["of_limit"] == pytest.approx(2 / 14)
    assert x["samples_vs_ddp"] == pytest.approx(0.5) and x["speedup_vs_ddp"] == pytest.approx(50 / 14)
    table = lm_markdown(summarize(rows, 2.5), 2.5)
    assert "| zero-communication limit | | | 0 | 2 |" in table and "| x | 1.40 | - | 0.00 | 14 (10-30) |" in table
    fast = [{**r, "curve": [{**p, "seconds": p["seconds"] / 100} for p in r["curve"]]} if r["method"] == "x" else r
            for r in rows]
    assert "(beats it)" in lm_markdown(summarize(fast, 2.5), 2.5)  # x at 0.14 s: faster than the limit's 2 s
    # an unreached target counts as the slowest: the median of (10, not reached, not reached) is not reached
    rows[1]["curve"][-1]["loss"] = rows[4]["curve"][-1]["loss"] = rows[4]["curve"][1]["loss"] = 2.6
    rows[1]["curve"][1]["loss"] = 2.7
    x = {r["method"]: r for r in summarize(rows, 2.5)}["x"]
    assert x["seconds_to_target"] is None and x["reached"] == 1 and x["seconds_range"] == (30.0, None)


def test_the_heterogeneous_limit_sums_the_hosts_throughputs() -> None:
    slow_alone = _run("alone", 0, [0, 2, 4], [5.0, 4.0, 3.5], rank_steps=[40, 20], rank_clocks=[4.0, 4.0],
                      slow_host=[1, 0.5], pace="host 1 at 0.5 speed: pinned")
    assert host_throughputs(slow_alone) == [40.0, 20.0]
    rows = [_run("ddp", 0, [0, 5, 10], [5.0, 3.0, 2.5], slow_host=[1, 1.0]),
            _run("alone", 0, [0, 2, 4], [5.0, 4.0, 3.5], rank_steps=[40, 40], rank_clocks=[4.0, 4.0], slow_host=[1, 1.0]),
            _run("ddp", 0, [0, 10, 20], [5.0, 3.0, 2.5], slow_host=[1, 0.5]), slow_alone]
    summary = summarize(rows, 2.5)
    limits = {tuple(r["slow_host"]): r["limit_s"] for r in summary if r["method"] == "ddp"}
    assert limits == {(1, 1.0): pytest.approx(2.0), (1, 0.5): pytest.approx(160 / 60)}
    table = lm_markdown(summary, 2.5)
    assert "Slow host: host 1 at 0.5 speed" in table and "trained at 0.50 of the other hosts' samples/s" in table
    assert "| ddp | 16.0 | 10 | 0.20 | 8.0 | 20 | 0.13 | 2.00 |" in table


def test_options_and_schedules_are_checked() -> None:
    with pytest.raises(ValueError, match=r"inner_steps \(10\) must be a multiple of fragments \(4\).*inner_steps=12"):
        TorchftDiLoCoOptions.parse({"inner_steps": 10, "fragments": 4})
    with pytest.raises(ValueError, match="torchft_diloco options: outer_lrr: Extra inputs are not permitted"):
        TorchftDiLoCoOptions.parse({"outer_lrr": 1.0})
    assert TorchftDiLoCoOptions.parse(None).outer_lr == 0.7
    with pytest.raises(ValueError, match="fraction must be in"):
        SlowHost.parse("1:0")
    with pytest.raises(ValueError, match="host must be 0..1"):
        SlowHost.parse("2:0.5", hosts=2)
    with pytest.raises(ValueError, match="HOST:FRACTION"):
        SlowHost.parse("half")
    assert SlowHost.parse("1:0.5") == SlowHost(1, 0.5)
    assert plan_cores([0, 1], rank=1, ranks_per_host=1, world_size=2) == ("sleep", [1])
    assert plan_cores([0, 1], rank=3, ranks_per_host=2, world_size=4) == ("burn", [1])
    assert plan_cores([0, 1], rank=2, ranks_per_host=1, world_size=3) == ("burn", None)
    assert steps_independently("async", None) and not steps_independently("async", {"warmup_steps": 5})
    assert steps_independently("alone", None) and not steps_independently("alone", None, sharded=True)
    assert not steps_independently("diloco", None)
    for method in ("diloco_timed", "sparseloco_timed"):
        name, options = LM_METHOD_OPTIONS[method]
        assert merges_in_rounds(name, options) and steps_independently(name, options, sharded=True)
    assert not merges_in_rounds("diloco", {"inner_steps": 25}) and not merges_in_rounds("async", {"round_seconds": 1})


def test_rounds_bounded_in_time_run_with_a_slow_host(tmp_path: Path) -> None:
    """diloco_timed (rounds of 0.5 s here) runs with a slow host: every rank evaluates after the same number of
    merges (on the average of weights that hold what each replica trained since it sent the round)."""
    from benchmarks import lm

    variants = '{"diloco_timed": ["diloco", {"round_seconds": 0.5}]}'
    rows = lm.main([*SMOKE, "--methods", "diloco_timed", "--slow-host", "1:0.5", "--variants", variants,
                    "--results", str(tmp_path)])
    assert [(r["method"], r["slow_host"]) for r in rows] == [("diloco_timed", [1, 1.0]), ("diloco_timed", [1, 0.5])]
    for row in rows:
        assert "error" not in row, row.get("log")
        assert row["independent_steps"] and len(row["curve"]) >= 3 and min(row["rank_steps"]) > 0, row["curve"]
        assert row["evaluated"] == "after merges"


def test_rounds_of_inner_steps_are_evaluated_after_their_merges(tmp_path: Path) -> None:
    """--eval-after-merges: diloco and sparseloco (2 and 3 inner steps here) are evaluated only right after merges,
    where every rank holds the global weights (nothing to average); streaming diloco is still evaluated at step
    counts, mid-round, on the average of weights that differ."""
    from benchmarks import lm

    variants = ('{"diloco_h2": ["diloco", {"inner_steps": 2}], "sparseloco_h3": ["sparseloco", {"inner_steps": 3}], '
                '"streaming": ["diloco", {"inner_steps": 4, "streaming": true, "fragments": 2, "overlap_steps": 1}]}')
    rows = lm.main([*SMOKE, "--methods", "diloco_h2,sparseloco_h3,streaming", "--variants", variants,
                    "--eval-after-merges", "--results", str(tmp_path)])
    by_method = {r["method"]: r for r in rows}
    for row in rows:
        assert "error" not in row, row.get("log")
    for method, every in (("diloco_h2", 2), ("sparseloco_h3", 3)):
        merged = by_method[method]
        assert merged["evaluated"] == "after merges" and len(merged["curve"]) >= 3
        assert all(p["step"] % every == 0 for p in merged["curve"]), merged["curve"]
        assert merged["evals_averaged"] == 0
    streaming = by_method["streaming"]
    assert streaming["evaluated"] == "at step counts" and streaming["evals_averaged"] > 0, streaming["curve"]
    assert "Evaluated after merges: diloco_h2, sparseloco_h3; at step counts: streaming." in \
        (tmp_path / "lm.md").read_text()
