"""Smoke test of the language-model benchmark (``make bench-lm``): it runs on loopback with a tiny model
for a couple of seconds per method and writes its table, curves and plot; the time/samples-to-target
arithmetic is checked on hand-made curves. Never timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.lm_report import crossing, loss_at, summarize
from benchmarks.report import have_matplotlib
from tests.documented import command


def test_lm_benchmark_runs_and_writes_results(tmp_path: Path) -> None:
    from benchmarks import lm

    # benchmarks/README.md's loopback command, its results written here
    rows = lm.main([*command("benchmarks/README.md", "python -m benchmarks.lm"), "--results", str(tmp_path)])
    assert [r["method"] for r in rows] == ["ddp", "diloco_streaming"]
    for row in rows:
        assert "error" not in row, row.get("log")
        curve = row["curve"]
        assert curve[0]["step"] == 0 and curve[-1]["seconds"] >= 2 and len(curve) >= 3
        assert curve[-1]["loss"] < curve[0]["loss"]  # it learns
    assert rows[1]["algorithm"] == "diloco" and rows[1]["options"]["streaming"] is True
    table = (tmp_path / "lm.md").read_text()
    assert "| ddp |" in table and "| diloco_streaming |" in table and "seconds to loss 4.5" in table
    data = json.loads((tmp_path / "lm.json").read_text())
    assert data["target_loss"] == 4.5 and len(data["runs"]) == 2 and "seconds_to_target" in data["summary"][0]
    assert (tmp_path / "lm.png").exists() == have_matplotlib()


def test_sharded_lm_benchmark_runs_against_hsdp_and_the_zero_communication_limit(tmp_path: Path) -> None:
    from benchmarks import lm

    rows = lm.main(["--loopback", "--networks", "loopback", "--model", "lm-tiny", "--budget", "2", "--evals", "3",
                    "--methods", "hsdp,alone,diloco", "--corpus-bytes", "300000", "--target", "4.5",
                    "--ranks-per-host", "2", "--world-size", "4", "--results", str(tmp_path)])
    assert [r["method"] for r in rows] == ["hsdp", "alone", "diloco"]
    for row in rows:
        assert "error" not in row, row.get("log")
        assert row["sharded"] and row["hosts"] == 2 and row["world_size"] == 4
        assert row["curve"][-1]["loss"] < row["curve"][0]["loss"]  # it learns
        # a rank holds about half of the replicated model's parameters, gradients and optimizer state
        assert 0.45 < row["held_bytes_per_rank"] / row["replicated_bytes_per_rank"] < 0.6, row
    table = (tmp_path / "lm_sharded.md").read_text()
    assert "2 hosts x 2 ranks (FSDP2 inside a host)" in table and "sooner than hsdp" in table
    assert "share of the zero-communication limit" in table and "| alone |" in table


def test_lm_methods_include_every_algorithm_the_peers_and_the_streaming_variant() -> None:
    from benchmarks.lm import lm_methods
    from bagua_core.plugins import algorithm_registry

    methods = lm_methods()
    assert methods[:6] == ["ddp", "ddp_fp16", "ddp_powersgd", "alone", "torchft_diloco", "torchft_diloco_streaming"]
    assert set(methods) >= set(algorithm_registry.names()) - {"decentralized_dp"}
    assert "diloco_streaming" in methods and "powersgd" in methods
    # a variant runs once its algorithm is registered (sparseloco: from its own package)
    assert ("sparseloco" in methods) == ("sparseloco" in algorithm_registry.names())


CURVE = [{"seconds": 0.0, "step": 0, "loss": 5.0}, {"seconds": 10.0, "step": 10, "loss": 3.0},
         {"seconds": 20.0, "step": 20, "loss": 2.0}]


@pytest.mark.parametrize("target, seconds", [(4.0, 5.0), (2.5, 15.0), (2.0, 20.0), (1.0, None), (6.0, 0.0)])
def test_crossing_is_interpolated(target: float, seconds: float | None) -> None:
    assert crossing(CURVE, target, "seconds") == seconds


def test_summary_speedups_and_samples() -> None:
    base = {"world_size": 2, "batch_size": 4, "budget_s": 20.0, "steps": 20, "tx_bytes": 0, "iface": "eth0"}
    slow = [{**p, "seconds": p["seconds"] * 4} for p in CURVE]  # DDP on a slow link: 4x the time
    fast = [{**p, "step": p["step"] * 2} for p in CURVE]  # twice the samples in the same time
    rows = [{**base, "method": "ddp", "network": "slow", "curve": slow},
            {**base, "method": "x", "network": "slow", "curve": fast},
            {**base, "method": "ddp", "network": "fast", "curve": CURVE},
            {**base, "method": "y", "network": "fast", "curve": [{**CURVE[0]}, {**CURVE[1], "loss": 4.0}]}]
    summary = {(r["network"], r["method"]): r for r in summarize(rows, 2.5)}
    assert summary["slow", "x"]["speedup_vs_ddp"] == pytest.approx(4.0)
    assert summary["slow", "x"]["samples_vs_ddp"] == pytest.approx(2.0)
    assert summary["fast", "y"]["seconds_to_target"] is None and summary["fast", "y"]["speedup_vs_ddp"] is None
    assert loss_at(CURVE, 15.0) == pytest.approx(2.5)
    ddp_short = [{**base, "method": "ddp", "network": "n", "curve": CURVE[:2]},
                 {**base, "method": "z", "network": "n", "curve": CURVE}]
    bounded = {r["method"]: r for r in summarize(ddp_short, 2.5)}
    assert bounded["z"]["speedup_bound"] == ">" and bounded["z"]["speedup_vs_ddp"] == pytest.approx(10 / 15)


def test_ddp_out_of_budget_gives_a_bound_and_an_estimate(tmp_path: Path) -> None:
    from benchmarks.lm_report import main as rewrite, write_lm

    base = {"world_size": 2, "batch_size": 4, "budget_s": 40.0, "steps": 10, "tx_bytes": 0, "iface": "eth0",
            "model": "m", "params": 1, "seq_len": 8}
    slow_ddp = [{**p, "seconds": p["seconds"] * 4} for p in CURVE[:2]]  # 10 steps in 40 s, loss 3.0
    rows = [{**base, "method": "ddp", "network": "fast", "curve": CURVE},  # reaches 2.5 after 15 steps
            {**base, "method": "ddp", "network": "slow", "curve": slow_ddp},
            {**base, "method": "x", "network": "slow", "curve": CURVE}]  # reaches 2.5 after 15 s
    x = {(r["network"], r["method"]): r for r in summarize(rows, 2.5)}["slow", "x"]
    assert x["speedup_bound"] == ">" and x["speedup_vs_ddp"] == pytest.approx(40 / 15)
    assert x["ddp_seconds_estimated"] == pytest.approx(60.0)  # 15 steps at DDP's 4 s/step here
    assert x["speedup_vs_ddp_estimated"] == pytest.approx(4.0)
    write_lm(rows, 2.5, tmp_path)
    assert "| x |" in (tmp_path / "lm.md").read_text() and ">2.67x (est. 4.0x)" in (tmp_path / "lm.md").read_text()
    rewrite([str(tmp_path / "lm.json"), "--target", "3.5"])
    assert "seconds to loss 3.5" in (tmp_path / "lm.md").read_text()


def test_sharded_methods_are_the_baselines_and_the_algorithms_that_support_sharding() -> None:
    from benchmarks.lm import lm_methods

    methods = lm_methods(sharded=True)
    assert methods[:4] == ["hsdp", "alone", "torchft_diloco", "torchft_diloco_streaming"]
    assert "diloco" in methods and "diloco_streaming" in methods and "decentralized_dp" not in methods
    assert "ddp" not in methods
