"""The feature ``cached_dataset`` trains bit for bit as a ``CachedDataset`` written by hand: on 2 gloo ranks
sharing a node's redis-server (spawned here, joined by both ranks), two epochs over the cached dataset (the
second served from the cache) end with equal weights, and every sample read was written to the store."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from tests.distributed import run_workers

CAPACITY = 16 << 20
N = 14


class Samples(Dataset):
    """Samples made on every read (what a cache spares: decoding, augmenting)."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(i)
        return torch.randn(4, generator=gen), torch.tensor(i % 2)

    def __len__(self) -> int:
        return N


def _cached(rank: int) -> dict[str, Any]:
    from torch.utils.data import DataLoader, DistributedSampler

    import bagua_core
    from bagua_contrib.cached_dataset import CachedDataset

    def train(how: str) -> tuple[dict[str, torch.Tensor], CachedDataset]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        if how == "by hand":
            model = model.with_bagua([optimizer], "gradient_allreduce")
            dataset = CachedDataset(Samples(), "redis", "hand", 3, capacity_per_node=CAPACITY)
            sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=1)
            loader = DataLoader(dataset, batch_size=3, sampler=sampler)
        else:
            options = {"dataset_name": "feature", "writer_buffer_size": 3,
                       "store": {"capacity_per_node": CAPACITY}}
            model = model.with_bagua([optimizer], "gradient_allreduce", features={"cached_dataset": options})
            loader = model.bagua_data_loader(Samples(), batch_size=3, seed=1)
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
        weights = {name: t.detach().clone() for name, t in model.state_dict().items()}
        model.bagua_shutdown()
        return weights, loader.dataset

    by_hand, hand_dataset = train("by hand")
    by_name, feature_dataset = train("by name")
    for dataset in (hand_dataset, feature_dataset):
        dataset.cache_loader.flush()
    bagua_core.barrier()  # both ranks wrote what they read
    keys = feature_dataset.cache_loader.num_keys()
    bagua_core.barrier()
    for dataset in (hand_dataset, feature_dataset):
        dataset.cache_loader.shutdown()  # (joined the test's server: it keeps running)
    return {"by hand": by_hand, "by name": by_name, "keys": keys,
            "types": [type(d).__name__ for d in (hand_dataset, feature_dataset)]}


@pytest.mark.redis
def test_cached_dataset_trains_as_cached_dataset_by_hand(tmp_path, monkeypatch) -> None:
    from bagua_contrib.utils.redis_server import acquire_local_server

    state = str(tmp_path / "redis-state")
    monkeypatch.setenv("BAGUA_REDIS_STATE_DIR", state)
    server = acquire_local_server(CAPACITY)
    try:
        assert server.spawned
        results = run_workers(_cached, 2, env={"BAGUA_REDIS_STATE_DIR": state}, timeout=180)
    finally:
        server.stop()
    for seen in results:
        assert seen["types"] == ["CachedDataset", "CachedDataset"]
        assert seen["keys"] == 2 * N  # "hand_<i>" and "feature_<i>" for every sample
        assert seen["by hand"].keys() == seen["by name"].keys()
        for name, tensor in seen["by hand"].items():
            assert torch.equal(seen["by name"][name], tensor), name
