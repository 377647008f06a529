"""Smoke test of the benchmarks: they run and write their results (never timed; no root, no netns).

The end-to-end harness runs on loopback with the tiny model for 2 steps of a DDP baseline and
gradient_allreduce; the convergence benchmark runs 1 epoch of 2 methods; the micro-benchmarks run once
each with ``--benchmark-disable``. The PNG plots are checked only where matplotlib is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import have_matplotlib
from tests.documented import command

ROOT = Path(__file__).resolve().parent.parent


def test_e2e_rounds_merge_into_medians_and_ranges() -> None:
    from benchmarks.e2e import merge_rounds
    from benchmarks.report import e2e_markdown

    def row(method: str, k: int, ms: float) -> dict:
        return {"method": method, "round": k, "ms_per_step": ms, "tx_bytes_per_step": 10.0 * k, "network": "n",
                "samples_per_s": 1.0, "loss": 0.0, "model": "m", "params": 1, "batch_size": 1, "world_size": 2}

    rows = [row("ddp", 0, 100), row("x", 0, 40), row("ddp", 1, 200), row("x", 1, 100), row("ddp", 2, 100),
            row("x", 2, 30), {"method": "y", "error": "boom", "network": "n", "round": 0}]
    merged = merge_rounds(rows, ["ddp", "x", "y"])
    assert [r["method"] for r in merged] == ["ddp", "x", "y"]
    x = merged[1]
    assert x["ms_per_step"] == 40 and x["rounds_ms"] == [40, 100, 30] and x["ratio_ddp"] == 0.4
    assert x["ratio_ddp_range"] == (0.3, 0.5) and x["tx_bytes_per_step"] == 10.0
    assert "0.40x (0.30-0.50)" in e2e_markdown(merged) and "40.0 (30-100)" in e2e_markdown(merged)
    assert merge_rounds(rows[:2], ["ddp", "x"]) == rows[:2]  # one round: unchanged
    assert "failed_rounds" not in x
    # a round that failed where the others ran is named beside the median of those that ran
    broken = rows[:4] + [{"method": "x", "error": "killed", "network": "n", "round": 2}, row("ddp", 2, 100)]
    x = merge_rounds(broken, ["ddp", "x"])[1]
    assert x["rounds_ms"] == [40, 100] and x["failed_rounds"] == [{"round": 2, "error": "killed"}]


def test_e2e_harness_writes_table_and_rows(tmp_path: Path) -> None:
    from benchmarks import e2e

    # benchmarks/README.md's loopback command, its results written here
    rows = e2e.main([*command("benchmarks/README.md", "python -m benchmarks.e2e"), "--timeout", "60",
                     "--results", str(tmp_path)])
    assert [r["method"] for r in rows] == ["ddp", "gradient_allreduce", "auto"]
    for row in rows:
        assert "error" not in row, row.get("log")
        assert row["ms_per_step"] > 0 and row["samples_per_s"] > 0 and row["tx_bytes_per_step"] > 0
        assert row["cpu_ms_per_step"] > 0
        assert len(row["step_ms_rank0"]) == (3 if row["method"] == "auto" else 2)  # auto: its choosing is timed
    table = (tmp_path / "e2e.md").read_text()
    assert "| ddp |" in table and "| gradient_allreduce |" in table and "1.00x" in table
    # whose codec kernels ran is in the header and in every row
    assert ("codecs: native kernels;" if e2e.codec_backend() == "native" else "codecs: python fallback: ") in table
    assert {row["codec_backend"] for row in rows} == {e2e.codec_backend()}
    assert len(json.loads((tmp_path / "e2e.json").read_text())) == 3
    assert (tmp_path / "e2e.png").exists() == have_matplotlib()


def test_e2e_harness_reports_a_failing_method_and_runs_the_rest(tmp_path: Path) -> None:
    from benchmarks import e2e

    rows = e2e.main(["--loopback", "--networks", "loopback", "--model", "tiny", "--warmup", "1", "--steps", "1",
                     "--methods", "no_such_algorithm,ddp", "--timeout", "60", "--results", str(tmp_path)])
    assert [r["method"] for r in rows] == ["no_such_algorithm", "ddp"]
    assert "no_such_algorithm" in rows[0]["error"] or "unknown" in rows[0]["log"]
    assert "ms_per_step" in rows[1]
    assert "| no_such_algorithm | failed" in (tmp_path / "e2e.md").read_text()


def test_a_rank_that_prints_much_does_not_block_the_job(tmp_path: Path) -> None:
    """The launcher keeps each rank's output in a file: with pipes read one rank after the other, rank 1 blocked
    in its write (torchft's info logs did, in the LM benchmark) while rank 0 waited for it in a collective."""
    from benchmarks.launch import launch

    launch("tests.chatty_rank", [str(tmp_path / "done")], 2, timeout=60)
    assert (tmp_path / "done").exists()


def test_convergence_benchmark_writes_curves(tmp_path: Path) -> None:
    from benchmarks import convergence

    rows = convergence.main(["--network", "loopback", "--epochs", "1", "--methods", "ddp,gradient_allreduce",
                             "--timeout", "60", "--results", str(tmp_path)])
    assert [r["method"] for r in rows] == ["ddp", "gradient_allreduce"]
    for row in rows:
        (point,) = row["curve"]
        assert point["seconds"] > 0 and point["loss"] > 0 and 0 <= point["test_accuracy"] <= 1
    assert "| gradient_allreduce | 1 |" in (tmp_path / "convergence.md").read_text()
    assert (tmp_path / "convergence.png").exists() == have_matplotlib()


def test_micro_benchmarks_run_once(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_bench_hotpaths.py", "--benchmark-disable", "-q", "-n", "0",
         "-p", "no:cacheprovider", "--rootdir", str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,  # (it took over 120 s once, in a loaded suite)
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "7 passed" in result.stdout


def test_methods_enumerate_ddp_baselines_and_registered_algorithms() -> None:
    from bagua_core.plugins import algorithm_registry
    from benchmarks.methods import DDP_METHODS, available_methods

    methods = available_methods()
    assert methods[: len(DDP_METHODS)] == list(DDP_METHODS)
    assert methods[len(DDP_METHODS)] == "gradient_allreduce"
    assert set(methods) >= set(algorithm_registry.names()) - {"decentralized_dp"}
    assert methods[-1] == "auto"


@pytest.mark.parametrize("rows, expected", [
    ([{"network": "n", "method": "ddp", "ms_per_step": 10.0}, {"network": "n", "method": "x", "ms_per_step": 5.0}],
     "0.50x"),
])
def test_ratio_to_ddp_in_table(rows: list[dict], expected: str) -> None:
    from benchmarks.report import e2e_markdown

    for row in rows:
        row.update(samples_per_s=1.0, tx_bytes_per_step=0.0, loss=1.0)
    assert f"| x | 5.0 | 1.0 | 0.00 | - | {expected} |" in e2e_markdown(rows)  # no CPU time measured: "-"


def test_overhead_benchmark_runs_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    result = subprocess.run(
        [sys.executable, "-m", "bagua_cli", "run", "--standalone", "--nproc_per_node=2", "-m",
         "benchmarks.overhead", "--blocks", "2", "--steps", "3", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert set(data["us_per_step"]) == {"plain", "ddp", "bagua", "bagua_ring"} and data["world_size"] == 2
    assert all(value > 0 for value in data["us_per_step"].values())


def test_a_run_on_the_codecs_python_fallback_is_said_before_it_measures(capsys: pytest.CaptureFixture) -> None:
    from benchmarks import e2e

    e2e.warn_unless_native("native", "benchmarks.e2e")
    assert capsys.readouterr().err == ""
    e2e.warn_unless_native("python fallback: bagua_core._native_cpu is not built", "benchmarks.scale")
    err = capsys.readouterr().err
    assert err.startswith("benchmarks.scale: WARNING") and "is not built" in err and "pip install -e ." in err


def test_optimizer_step_benchmark_counts_and_times(tmp_path: Path) -> None:
    """benchmarks.optimizer_step on ResNet-50's 161 parameters: every optimizer timed, its aten operators
    counted, the ratios against Adam(foreach) written."""
    from benchmarks.optimizer_step import count_aten_ops, main, resnet50_shapes

    shapes = resnet50_shapes()
    assert len(shapes) == 161 and sum(torch_numel(s) for s in shapes) == 25_557_032
    assert count_aten_ops(lambda: __import__("torch").ones(3).add_(1)) == 2
    out = tmp_path / "optimizer.json"
    report = main(["--rounds", "1", "--steps", "1", "--devices", "cpu", "--json", str(out)])["cpu"]
    assert set(report) == {"adam_foreach", "qadam_warmup", "qadam_after_warmup"}
    assert all(row["step_s"] > 0 and row["aten_ops"] > 0 for row in report.values())
    assert json.loads(out.read_text())["results"]["cpu"]["adam_foreach"]["ratio"] == 1.0


def torch_numel(shape: tuple[int, ...]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total
