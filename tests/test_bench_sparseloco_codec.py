"""Smoke test of ``benchmarks/sparseloco_codec.py``: it runs on a small fragment and writes every row, both paths
timed (never a timed test: nothing here depends on how long anything took)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bagua_core.kernels import native_backend


@pytest.mark.skipif(native_backend() != "native", reason="the C kernels are not built")
def test_the_benchmark_times_every_kernel_on_both_paths(tmp_path: Path) -> None:
    from benchmarks.sparseloco_codec import main

    out = tmp_path / "codec.json"
    table = tmp_path / "codec.md"
    rows = main(["--numels", "5000,300,4096", "--repeats", "2", "--json", str(out), "--markdown", str(table)])
    names = [row["name"] for row in rows]
    assert names[:5] == ["top-k + accumulator update (e = 0.95 e + delta, per-chunk top-k)", "quantise + pack",
                         "index field: encode", "index field: decode", "decode + average of 2 messages"]
    assert "a round: encode + decode_average of 2" in names
    saved = json.loads(out.read_text())
    assert saved["facts"] == {"tensors": 3, "values": 9396, "chunks": 4, "entries": 256, "message_bytes": 295}
    assert all(row[f"{side}_{kind}_ms"]["median"] > 0 for row in saved["rows"] for side in ("torch", "native")
               for kind in ("cpu", "wall"))
    assert table.read_text().count("\n| ") == len(rows) + 2  # the header, its rule, a line a row


@pytest.mark.skipif(native_backend() != "native", reason="the C kernels are not built")
def test_the_round_cost_benchmark_runs_every_arm_in_a_job_of_its_own(tmp_path: Path) -> None:
    from benchmarks.sparseloco_round_cost import main

    table = tmp_path / "round.md"
    result = main(["--model", "tiny", "--steps", "2", "--repeats", "1", "--markdown", str(table)])
    assert list(result["times_ms"]) == ["native/rounds", "unfused/rounds", "python/rounds", "none/none"]
    assert result["parameters"] == 32 * 32 + 32 + 32 * 10 + 10
    assert all(len(values) == 1 and values[0] > 0 for values in result["times_ms"].values())
    text = table.read_text()
    assert "a round every step, native codec" in text and "| no round (inner_steps past the run) |" in text
    assert "| a round every step, native codec, unfused round |" in text
