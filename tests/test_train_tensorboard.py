"""``bagua train --tensorboard DIR``: the event file rank 0 writes holds the run's steps and rounds, and they add up
to what the summary (``--summary-json``) counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)


def test_train_writes_steps_and_rounds_that_add_up_to_the_summary(tmp_path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_dir, summary_path = tmp_path / "tb", tmp_path / "summary.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    result = subprocess.run([sys.executable, "-m", "bagua_cli", "train", "--nproc", "2", "--epochs", "1",
                             "--no-progress", "--algorithm", "diloco", "--option", "inner_steps=4", "--tensorboard",
                             str(log_dir), "--summary-json", str(summary_path)],
                            capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    scalars = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}
    assert set(scalars) == {"step/exposed_comm_s", "step/bytes", "step/loss", "round/compression_ratio",
                            "round/bytes"}
    steps = len(scalars["step/bytes"])
    assert [s for s, _ in scalars["step/bytes"]] == list(range(1, steps + 1)) and steps >= 8
    # diloco's rounds of 4 inner steps: bytes only at their ends, and all of them are the summary's
    assert [s for s, v in scalars["step/bytes"] if v > 0] == list(range(4, steps + 1, 4))
    assert sum(v for _, v in scalars["step/bytes"]) == summary["bytes_communicated_per_rank"]
    assert [s for s, _ in scalars["round/compression_ratio"]] == list(range(4, steps + 1, 4))
    assert len(scalars["round/bytes"]) == summary["rounds"] == steps // 4
    assert all(v == pytest.approx(1.0) for _, v in scalars["round/compression_ratio"])
    assert summary["compression_ratio"] == pytest.approx(1.0)
    assert all(v >= 0 for _, v in scalars["step/exposed_comm_s"])
    assert 0 < summary["exposed_comm_s_per_rank"] < summary["seconds"]
    assert all(0 < v < 3 for _, v in scalars["step/loss"])  # cross-entropy over 10 classes starts near 2.3
    assert "communication: " in result.stdout and "compression 1.00x over" in result.stdout
