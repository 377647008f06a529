"""The original's launcher and a complete training script in the original's style run unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bagua_cli.legacy_launch import translate

SCRIPT = Path(__file__).parent / "compat" / "train_original_style.py"
ROOT = Path(__file__).parent.parent


def _launch(tmp_path: Path, *script_args: str, launcher: str = "bagua.distributed.launch") -> dict:
    out = tmp_path / "result.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", launcher, "--nproc_per_node=2", str(SCRIPT), "--out", str(out), *script_args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("mode", [(), ("--ddp",)], ids=["with_bagua", "data_parallel.DistributedDataParallel"])
def test_original_style_script_under_the_original_launcher(tmp_path, mode):
    result = _launch(tmp_path, *mode)
    assert result["world"] == 2
    assert result["same"], "gradient allreduce keeps every rank's weights identical"
    assert result["last"] < 0.7 * result["first"], result


def test_run_launcher_too(tmp_path):
    result = _launch(tmp_path, "--steps", "3", launcher="bagua.distributed.run")
    assert result["world"] == 2 and result["same"]


def test_original_flags_are_mapped_or_noted():
    args, env, notes = translate(["--nproc_per_node=2", "--default_bucket_size=1024", "--autotune_level=1",
                                  "--bagua_service_port=29501", "--is_output_autotune_log", "train.py", "--lr", "1"])
    assert args[:2] == ["--standalone", "--nproc-per-node=2"] and args[-3:] == ["train.py", "--lr", "1"]
    assert env == {"BAGUA_DEFAULT_BUCKET_SIZE": "1024", "BAGUA_AUTOTUNE": "1"}
    assert len(notes) == 3 and any("--bagua_service_port" in n for n in notes)
    args, _, _ = translate(["--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.1", "--master_port=1234",
                            "--set_additional_flag", "-m", "pkg.train"])
    assert "--standalone" not in args and "--node-rank=1" in args and "--master-addr=10.0.0.1" in args
    assert args[-4:] == ["-m", "bagua_cli.local_rank_shim", "--module", "pkg.train"]
    args, _, _ = translate(["--master_port=29999", "train.py"])
    assert args == ["--master-port=29999", "train.py"]  # torchrun's static rendezvous on 127.0.0.1:29999


def test_local_rank_shim_passes_local_rank_as_the_original(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n")
    env = dict(os.environ, LOCAL_RANK="3", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "bagua_cli.local_rank_shim", "--script", str(script), "--lr", "1"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "['--local_rank=3', '--lr', '1']", out.stderr
