"""Every byte a collective moves is counted (``bagua_core.runtime.communication.stats``, what ``bagua train``
reports as "MB handed to collectives"), point-to-point exchanges included."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bagua_core.runtime.communication import stats
from tests.distributed import run_workers
from tests.models import SmallNet, batch

STEPS = 4


def _decentralized_bytes(rank: int, mode: str) -> dict:
    model = SmallNet(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], {"name": "decentralized", "hierarchical": False,
                                           "peer_selection_mode": mode})
    stats.reset()  # what wrapping broadcast is not part of the steps
    for step in range(STEPS):
        x, y = batch(rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    weight_bytes = sum(b.padded_numel for b in model.bagua_buckets) * 4
    out = {"counted": stats.snapshot(), "weight_bytes": weight_bytes,
           "model_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}
    model.bagua_shutdown()
    return out


def test_shift_one_counts_the_weights_it_sends() -> None:
    for out in run_workers(_decentralized_bytes, 2, "shift_one"):
        assert out["weight_bytes"] >= out["model_bytes"] > 0
        sends = out["counted"].get("send", {"calls": 0, "bytes": 0})
        assert sends == {"calls": STEPS, "bytes": STEPS * out["weight_bytes"]}, out["counted"]
        assert sum(c["bytes"] for c in out["counted"].values()) == STEPS * out["weight_bytes"]


def test_all_mode_counts_its_allreduces() -> None:
    for out in run_workers(_decentralized_bytes, 2, "all"):
        assert out["counted"]["allreduce"]["bytes"] == STEPS * out["weight_bytes"], out["counted"]
