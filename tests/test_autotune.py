"""Autotuning: off by default; with it on, bucket size (and hierarchical) are tried during the first
steps, the slowest rank's time decides (allreduce MAX), rank 0's choice is broadcast and fixed, it
is logged, and training stays equal to torch DDP while it tunes."""

from __future__ import annotations

import logging
import os
import time

import pytest
import torch
import torch.nn.functional as F

from bagua_features import autotune
from bagua_core.runtime.exceptions import BaguaConfigError
from tests.distributed import run_workers
from tests.models import SmallNet, batch

STEPS = 12


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _train_like_ddp(rank: int, configure: dict | None, slow: dict[int, int]) -> dict:
    """Train with gradient_allreduce next to torch DDP; sleep on this rank while the number of buckets
    is ``slow[rank]`` (a candidate that is slow on one rank only)."""
    handler = _Collect()
    logging.getLogger("bagua.autotune").addHandler(handler)
    logging.getLogger("bagua.autotune").setLevel(logging.INFO)
    reference = torch.nn.parallel.DistributedDataParallel(SmallNet(seed=rank))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model = model.with_bagua([optimizer], "gradient_allreduce")
    if configure is not None:
        autotune.configure(model, **configure)
    bucket_counts, op_hierarchical = [], []
    for step in range(STEPS):
        x, y = batch(rank, step)
        for net, opt in ((reference, ref_opt), (model, optimizer)):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
        bucket_counts.append(len(model.bagua_buckets))
        # what the buckets' operations run: the candidate's hierarchical, not only the impl's attribute
        op_hierarchical.append({op.hierarchical for b in model.bagua_buckets for op in b.ops})
        if len(model.bagua_buckets) == slow.get(rank):
            time.sleep(SLOW_S)
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)  # equal while it tunes
    # tuned only through BAGUA_AUTOTUNE (configure() was for `model` only)
    plain = SmallNet()
    plain = plain.with_bagua([torch.optim.SGD(plain.parameters(), lr=0.1)], "gradient_allreduce")
    for step in range(STEPS):
        plain(batch(rank, step)[0]).sum().backward()
    return {
        "result": getattr(model, "bagua_autotune_result", None),
        "bucket_counts": bucket_counts,
        "op_hierarchical": op_hierarchical,
        "hierarchical": model.bagua_algorithm.hierarchical,
        "bucket_size": getattr(model.bagua_algorithm, "bucket_size", None),
        "logs": handler.messages,
        "plain_result": getattr(plain, "bagua_autotune_result", None),
        "autotune_env": os.environ.get("BAGUA_AUTOTUNE"),
    }


SLOW_S = 0.4
"""A slow rank's extra time per step with its slow bucket count: 50 ms was within a loaded machine's noise
(a CI-like run chose 1 MiB buckets)."""


def test_bucket_size_decided_by_the_slowest_rank_and_fixed() -> None:
    # SmallNet's gradients: 64 B buckets -> 5 buckets, 1024 B -> 2, 1 MiB -> 1. Rank 0 is slow with 5
    # buckets, rank 1 with 1: only the max over ranks makes 1024 B (2 buckets) the best.
    env = {"BAGUA_AUTOTUNE": "1", "BAGUA_AUTOTUNE_WARMUP_STEPS": "2", "BAGUA_AUTOTUNE_TRIAL_STEPS": "2",
           "BAGUA_AUTOTUNE_BUCKET_SIZES": "64,60,1024,1048576"}
    results = run_workers(_train_like_ddp, 2, None, {0: 5, 1: 1}, env=env)
    for r in results:
        assert r["result"] == results[0]["result"]
        assert r["result"]["bucket_size"] == 1024 and r["bucket_size"] == 1024 and r["result"]["hierarchical"] is None
        assert len(r["result"]["step_time_s"]) == 3  # 60 B gives the same buckets as 64 B: not tried
        # steps 1-2 default (1 bucket), then 2 steps per candidate, then fixed from step 9 on
        assert r["bucket_counts"] == [1, 1, 5, 5, 2, 2, 1, 1] + [2] * 4
        assert any("autotune chose" in m and "1024" in m for m in r["logs"]), r["logs"]
        assert sum("trial" in m for m in r["logs"]) == 2 * 3  # BAGUA_AUTOTUNE=1 tunes both modules
        assert r["plain_result"] is not None


def test_hierarchical_tuned_on_two_nodes_and_configure() -> None:
    configure = {"warmup_steps": 1, "trial_steps": 3, "bucket_sizes": (1 << 20,)}
    results = run_workers(_train_like_ddp, 4, configure, {}, local_size=2)
    for r in results:
        assert r["result"] == results[0]["result"]
        assert set(r["result"]["step_time_s"]) == {str({"bucket_size": 1 << 20, "hierarchical": h}) for h in (False, True)}
        assert r["hierarchical"] == r["result"]["hierarchical"] and r["autotune_env"] is None
        # the buckets' operations ran both candidates, and then the choice
        assert set().union(*r["op_hierarchical"]) == {False, True}, r["op_hierarchical"]
        assert r["op_hierarchical"][-1] == {r["result"]["hierarchical"]}, r["op_hierarchical"]
        assert r["plain_result"] is None  # off by default


def test_options_validated(monkeypatch) -> None:
    monkeypatch.delenv("BAGUA_AUTOTUNE", raising=False)
    assert autotune.AutotuneConfig.from_env().enabled is False
    monkeypatch.setenv("BAGUA_AUTOTUNE", "1")
    monkeypatch.setenv("BAGUA_AUTOTUNE_TRIAL_STEPS", "1")
    with pytest.raises(BaguaConfigError, match="trial_steps"):
        autotune.AutotuneConfig.from_env()
    monkeypatch.setenv("BAGUA_AUTOTUNE_TRIAL_STEPS", "3")
    monkeypatch.setenv("BAGUA_AUTOTUNE_BUCKET_SIZES", "1024,0")
    with pytest.raises(BaguaConfigError, match="bucket_sizes"):
        autotune.AutotuneConfig.from_env()
