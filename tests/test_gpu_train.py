"""``bagua train --device cuda``: the main job on the GPU, one rank per GPU over NCCL and two ranks
sharing one GPU over gloo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


@pytest.mark.parametrize("nproc", [1, 2])
def test_train_on_cuda(nproc: int, tmp_path) -> None:
    summary = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, "-m", "bagua_cli", "train", "--nproc", str(nproc), "--device", "cuda", "--epochs", "3",
         "--no-progress", "--summary-json", str(summary)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(summary.read_text())
    assert result["device"] == "cuda" and result["world_size"] == nproc
    assert result["test_accuracy"] > 0.8, result


def test_auto_picks_cuda_only_with_a_gpu_per_rank(tmp_path) -> None:
    summary = tmp_path / "summary.json"
    nproc = torch.cuda.device_count() + 1
    done = subprocess.run(
        [sys.executable, "-m", "bagua_cli", "train", "--nproc", str(nproc), "--epochs", "1", "--no-progress",
         "--summary-json", str(summary)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads(summary.read_text())["device"] == "cpu"
