"""Elastic: ``bagua run`` passes torch's elastic options; a worker killed mid-training is restarted and
the job resumes from the last checkpoint, ending where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from bagua_examples.elastic_train import batch, make_model, make_optimizer
from tests.distributed import free_port, run_workers

STEPS, SAVE_EVERY, KILL_AT = 16, 5, 12


def _reference_params(world_size: int, steps: int) -> list[torch.Tensor]:
    """Uninterrupted data parallel training in one process: the gradient is the ranks' average."""
    model = make_model()
    optimizer = make_optimizer(model)
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        loss = sum(F.cross_entropy(model(x), y) for x, y in (batch(r, step) for r in range(world_size)))
        (loss / world_size).backward()
        optimizer.step()
    return [p.detach() for p in model.parameters()]


def _uninterrupted(rank: int, checkpoint_dir: str) -> list[torch.Tensor]:
    """The same job, the same code, never killed (bagua's workers, the same collectives)."""
    from bagua_examples.elastic_train import _parse, train

    return train(_parse(["--checkpoint-dir", checkpoint_dir, "--steps", str(STEPS), "--save-every", str(SAVE_EVERY)]))


def test_killed_worker_is_restarted_and_resumes_from_the_last_checkpoint(tmp_path) -> None:
    events, final = tmp_path / "events.jsonl", tmp_path / "final.pt"
    command = [
        sys.executable, "-m", "bagua_cli", "run",
        "--nnodes=1:1", "--nproc_per_node=2", "--max-restarts=1", "--monitor-interval=0.2",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "-m", "bagua_examples.elastic_train",
        "--checkpoint-dir", str(tmp_path / "ckpt"), "--steps", str(STEPS), "--save-every", str(SAVE_EVERY),
        "--kill-at-step", str(KILL_AT), "--kill-rank", "1", "--events", str(events), "--final-params", str(final),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", BAGUA_COMM_TIMEOUT_S="60")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=150, env=env)
    output = proc.stdout[-4000:] + proc.stderr[-6000:]
    assert proc.returncode == 0, output
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    last_checkpoint = (KILL_AT - 1) // SAVE_EVERY * SAVE_EVERY  # 10
    assert lines == [
        {"event": "start", "attempt": 0, "resumed_from": 0, "world_size": 2},
        {"event": "start", "attempt": 1, "resumed_from": last_checkpoint, "world_size": 2},
        {"event": "finish", "attempt": 1, "step": STEPS},
    ], output
    resumed = torch.load(final)
    for ours, reference in zip(resumed, _reference_params(2, STEPS)):  # data parallel training, indeed
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    uninterrupted = run_workers(_uninterrupted, 2, str(tmp_path / "uninterrupted"))[0]
    for ours, reference in zip(resumed, uninterrupted):  # a restart loses nothing: bit for bit
        assert torch.equal(ours, reference)


def test_bagua_run_rejects_a_bad_config_before_starting(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[algorithm]\nname = "gradient_allreduce"\nhierarchicl = true\n')
    proc = subprocess.run([sys.executable, "-m", "bagua_cli", "run", "--config", str(bad), "--standalone",
                           "--nproc_per_node=2", "-m", "bagua_examples.elastic_train", "--checkpoint-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "hierarchicl" in proc.stderr and "bad.toml" in proc.stderr, proc.stderr


@pytest.mark.parametrize("argument", ["--steps=0", "--save-every=-1"])
def test_options_validated(argument) -> None:
    from bagua_examples.elastic_train import _parse

    with pytest.raises(SystemExit):
        _parse(["--checkpoint-dir", "x", argument])
