"""Smoke test of ``benchmarks/eager_updates.py``: every variant runs on 2 ranks and reports a finite test loss per
seed (a loss per step count: nothing here depends on how long anything took)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest


@pytest.mark.timeout(300, func_only=True)
def test_every_variant_runs_and_reports_a_loss_per_seed(tmp_path: Path) -> None:
    from benchmarks.eager_updates import VARIANTS, main

    table = tmp_path / "eager.md"
    rows = main(["--seeds", "1", "--steps", "20", "--inner-steps", "4", "--overlap-steps", "2", "--outer-momenta", "0",
                 "--markdown", str(table)])
    assert [row["variant"] for row in rows] == list(VARIANTS)
    assert all(len(row["losses"]) == 1 and math.isfinite(row["losses"][0]) for row in rows)
    # the same data and start: the four ways of running the rounds do not all end at one loss
    assert len({round(row["losses"][0], 6) for row in rows}) > 1
    assert table.read_text().count("\n| 0 |") == len(VARIANTS)
