"""save_checkpoint / load_checkpoint: round trip, atomicity under SIGKILL mid-save, MoE on 2 ranks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

from bagua_features.checkpoints.checkpoint import TRACKER_FILENAME, get_checkpoint_name, load_checkpoint, save_checkpoint
from bagua_core.runtime.exceptions import BaguaError
from tests.distributed import run_workers
from tests.models import SmallNet, batch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup(seed: int):
    model = SmallNet(seed=seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _steps(model, optimizer, scheduler, start, count):
    for step in range(start, start + count):
        x, y = batch(0, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        scheduler.step()


def test_round_trip_and_resume(tmp_path) -> None:
    assert load_checkpoint(str(tmp_path), SmallNet()) == 0  # nothing saved yet
    model, optimizer, scheduler = _setup(0)
    _steps(model, optimizer, scheduler, 0, 3)
    save_checkpoint(3, str(tmp_path), model, optimizer, scheduler)
    assert (tmp_path / TRACKER_FILENAME).read_text() == "3"
    assert os.path.exists(get_checkpoint_name(str(tmp_path), 3))
    assert not [f for f in os.listdir(tmp_path / "iter_0000003") if ".tmp." in f]

    other, other_opt, other_sched = _setup(1)
    assert load_checkpoint(str(tmp_path), other, other_opt, other_sched) == 3
    for a, b in zip(model.state_dict().values(), other.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert other_sched.last_epoch == 3 and other_opt.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    _steps(model, optimizer, scheduler, 3, 2)
    _steps(other, other_opt, other_sched, 3, 2)  # resumes exactly (Adam moments restored)
    for a, b in zip(model.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b)

    partial = torch.nn.Sequential()
    partial.fc1 = torch.nn.Linear(8, 16)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        load_checkpoint(str(tmp_path), partial)
    assert load_checkpoint(str(tmp_path), partial, strict=False) == 3
    (tmp_path / TRACKER_FILENAME).write_text("garbage")
    with pytest.raises(BaguaError, match="should hold an iteration number"):
        load_checkpoint(str(tmp_path), model)


_KILLED_SAVER = """
import os, sys, time, torch
sys.path.insert(0, {root!r})
import bagua_features.checkpoints.checkpoint as ckpt
from tests.models import SmallNet
path, marker = sys.argv[1], sys.argv[2]
model = SmallNet(seed=0)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ckpt.save_checkpoint(1, path, model, opt)
with torch.no_grad():
    for p in model.parameters():
        p.add_(1.0)
real = ckpt._serialize
def slow(obj, f):
    f.write(b"half a checkpoint")
    f.flush()
    open(marker, "w").close()
    time.sleep(60)
    real(obj, f)
ckpt._serialize = slow
ckpt.save_checkpoint({iteration}, path, model, opt)
"""


@pytest.mark.parametrize("iteration", [2, 1])  # a new iteration, and overwriting the current one
def test_kill_during_save_keeps_previous_checkpoint(tmp_path, iteration) -> None:
    marker = tmp_path / "writing"
    script = _KILLED_SAVER.format(root=ROOT, iteration=iteration)
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "ckpt"), str(marker)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, "the saver exited early"
            assert time.monotonic() < deadline, "the saver never started writing"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    model = SmallNet(seed=5)
    assert load_checkpoint(str(tmp_path / "ckpt"), model) == 1
    for a, b in zip(model.state_dict().values(), SmallNet(seed=0).state_dict().values(), strict=True):
        assert torch.equal(a, b)  # the first save, not the half-written second one


def _moe_round_trip(rank: int, path: str) -> None:
    from bagua_contrib.moe import MoE

    def build(seed):
        torch.manual_seed(seed)
        net = torch.nn.ModuleDict({"proj": torch.nn.Linear(4, 4),
                                   "moe": MoE(4, torch.nn.Linear(4, 4), num_local_experts=2)})
        return net, torch.optim.Adam(net.parameters(), lr=0.1)

    model, optimizer = build(100 + rank)  # experts differ per rank
    with torch.no_grad():
        model["proj"].weight.fill_(7.0 + rank)  # rank 0's dense weights are the ones saved
    out, l_aux, _ = model["moe"](model["proj"](torch.randn(6, 4)))
    (out.sum() + l_aux).backward()
    optimizer.step()
    save_checkpoint(4, path, model, optimizer)
    files = sorted(os.listdir(os.path.join(path, "iter_0000004")))
    assert files == ["expert_rank_00000_states.pt", "expert_rank_00001_states.pt", "mp_rank_00_model_states.pt"]

    import bagua_core as bagua

    rank0_proj = model["proj"].weight.detach().clone()
    bagua.broadcast(rank0_proj, 0)
    assert rank == 0 or not torch.equal(rank0_proj, model["proj"].weight)
    fresh, fresh_opt = build(7)
    assert load_checkpoint(path, fresh, fresh_opt) == 4
    for name, value in fresh.state_dict().items():
        expected = model.state_dict()[name]
        if "experts" in name:
            assert torch.equal(value, expected), name  # this rank's own experts
        elif name == "proj.weight":
            assert torch.equal(value, rank0_proj), name  # rank 0's dense weights
    own = {id(p): i for i, p in enumerate(fresh.parameters())}
    assert len(fresh_opt.state) == len(own)
    expert_index = [i for i, (n, _) in enumerate(fresh.named_parameters()) if "experts" in n][0]
    assert torch.equal(fresh_opt.state_dict()["state"][expert_index]["exp_avg"],
                       optimizer.state_dict()["state"][expert_index]["exp_avg"])


def test_moe_checkpoint_two_ranks(tmp_path) -> None:
    run_workers(_moe_round_trip, 2, str(tmp_path))
