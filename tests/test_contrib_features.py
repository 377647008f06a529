"""The contrib features, selected by name, train bit for bit as the library calls made by hand do.

On 2 gloo ranks, a few steps of training with the feature selected by name (``with_bagua(..., features=...)``,
and for ``fused_optimizer`` and ``sync_batchnorm`` a config file's ``[features.<name>]`` table too) end with
the weights (``torch.equal``) of the same training written by hand: ``fuse_optimizer`` + ``fuse_step``;
``SyncBatchNorm.convert_sync_batchnorm``; a ``DataLoader`` over a ``LoadBalancingDistributedSampler`` against
``model.bagua_data_loader``; ``ignore_moe_params``. ``cached_dataset`` (a redis-server) is in
``tests/test_contrib_cached_feature.py``; options and refusals in ``tests/test_contrib_feature_options.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from tests.distributed import run_workers

TIMEOUT = 180


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer, copied (running statistics included)."""
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def _assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], what: str) -> None:
    assert a.keys() == b.keys(), what
    for name in a:
        assert torch.equal(a[name], b[name]), f"{what}: {name} differs"


def _batch(rank: int, step: int, n: int = 6, width: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(n, width, generator=gen) * (1 + rank), torch.randint(0, 2, (n,), generator=gen)


# --- fused_optimizer ----------------------------------------------------------------------------------------
def _fused(rank: int, config: str) -> dict[str, Any]:
    from bagua_contrib.fused_optimizer import fuse_optimizer, fuse_state_of

    def train(how: str) -> tuple[dict[str, torch.Tensor], int]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        if how == "by hand":
            fuse_optimizer(optimizer, do_flatten=True, check_flatten=True)
            model = model.with_bagua([optimizer], "gradient_allreduce", do_flatten=False)
        elif how == "by name":
            options = {"do_flatten": True, "check_flatten": True}
            model = model.with_bagua([optimizer], "gradient_allreduce", do_flatten=False,
                                     features={"fused_optimizer": options})
        else:
            model = model.with_bagua([optimizer], config, do_flatten=False)
        for step in range(4):
            x, y = _batch(rank, step)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.fuse_step()
        state = fuse_state_of(optimizer)
        weights = _weights(model)
        model.bagua_shutdown()
        return weights, state.fused_count if state is not None else -1

    return {how: train(how) for how in ("by hand", "by name", "from a file")}


def test_fused_optimizer_trains_as_fuse_optimizer_by_hand(tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    config.write_text('[algorithm]\nname = "gradient_allreduce"\n\n[features.fused_optimizer]\n'
                      'check_flatten = true\n')
    results = run_workers(_fused, 2, str(config), timeout=TIMEOUT)
    for seen in results:
        by_hand, count = seen["by hand"]
        assert count == 4  # one param group fused at each of the 4 steps
        for how in ("by name", "from a file"):
            _assert_equal(seen[how][0], by_hand, how)
            assert seen[how][1] == count, how
    _assert_equal(results[0]["by hand"][0], results[1]["by hand"][0], "the two ranks")


# --- sync_batchnorm -----------------------------------------------------------------------------------------
def _sync_batchnorm(rank: int, config: str) -> dict[str, Any]:
    from bagua_contrib.sync_batchnorm import SyncBatchNorm

    def train(how: str) -> tuple[dict[str, torch.Tensor], list[str]]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                                    torch.nn.Linear(6, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if how == "by hand":
            model = SyncBatchNorm.convert_sync_batchnorm(model).with_bagua([optimizer], "gradient_allreduce")
        elif how == "by name":
            model = model.with_bagua([optimizer], "gradient_allreduce", features=["sync_batchnorm"])
        else:
            model = model.with_bagua([optimizer], config)
        for step in range(3):
            x, y = _batch(rank, step, n=5 + rank)  # batches of different sizes: the statistics are the job's
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        kinds = [type(layer).__name__ for layer in model]
        weights = _weights(model)
        model.bagua_shutdown()
        return weights, kinds

    return {how: train(how) for how in ("by hand", "by name", "from a file")}


def test_sync_batchnorm_trains_as_convert_sync_batchnorm_by_hand(tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    config.write_text('[algorithm]\nname = "gradient_allreduce"\n\n[features.sync_batchnorm]\n')
    results = run_workers(_sync_batchnorm, 2, str(config), timeout=TIMEOUT)
    for seen in results:
        by_hand, kinds = seen["by hand"]
        assert kinds == ["Linear", "SyncBatchNorm", "ReLU", "Linear"]
        for how in ("by name", "from a file"):
            _assert_equal(seen[how][0], by_hand, how)
            assert seen[how][1] == kinds, how
    # the running statistics are those of both ranks' batches, so the ranks hold the same
    _assert_equal(results[0]["by name"][0], results[1]["by name"][0], "the two ranks")


# --- load_balancing_sampler ---------------------------------------------------------------------------------
def ink(sample: Any) -> float:
    """The cost the test balances: the absolute sum of a sample's input (``module:ink`` in the options)."""
    return float(sample[0].abs().sum())


def _load_balancing(rank: int) -> dict[str, Any]:
    from torch.utils.data import DataLoader, TensorDataset

    from bagua_contrib.load_balancing_sampler import LoadBalancingDistributedSampler

    gen = torch.Generator().manual_seed(7)
    dataset = TensorDataset(torch.randn(22, 4, generator=gen) * torch.rand(22, 1, generator=gen) * 5,
                            torch.arange(22) % 2, torch.arange(22))

    def train(how: str) -> tuple[dict[str, torch.Tensor], list[list[int]], str]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        if how == "by hand":
            model = model.with_bagua([optimizer], "gradient_allreduce")
            sampler = LoadBalancingDistributedSampler(dataset, ink, num_replicas=2, rank=rank, shuffle=True,
                                                      seed=3, drop_last=False, random_level=0.3)
            loader = DataLoader(dataset, batch_size=4, sampler=sampler)
        else:
            model = model.with_bagua([optimizer], "gradient_allreduce", features={"load_balancing_sampler": {
                "complexity": f"{__name__}:ink", "random_level": 0.3}})
            loader = model.bagua_data_loader(dataset, batch_size=4, seed=3)
        seen = []
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            for x, y, index in loader:
                seen.append(index.tolist())
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
        weights = _weights(model)
        model.bagua_shutdown()
        return weights, seen, type(loader.sampler).__name__

    return {how: train(how) for how in ("by hand", "by name")}


def test_load_balancing_sampler_gives_the_batches_of_the_sampler_by_hand() -> None:
    results = run_workers(_load_balancing, 2, timeout=TIMEOUT)
    for seen in results:
        weights, batches, kind = seen["by name"]
        assert kind == "LoadBalancingDistributedSampler"
        assert batches == seen["by hand"][1]
        _assert_equal(weights, seen["by hand"][0], "by name")
    first_epoch = [sum(r["by name"][1][:3], []) for r in results]  # 11 samples a rank, 3 batches an epoch
    assert sorted(first_epoch[0] + first_epoch[1]) == list(range(22))


# --- moe ----------------------------------------------------------------------------------------------------
def _moe(rank: int) -> dict[str, Any]:
    from bagua_contrib.moe import MoE, ignore_moe_params

    def train(how: str) -> tuple[dict[str, torch.Tensor], list[str]]:
        torch.manual_seed(100 + rank)  # the experts differ per rank (the dense weights are broadcast)
        moe = MoE(4, torch.nn.Linear(4, 4), num_local_experts=2, min_capacity=1)
        model = torch.nn.ModuleDict({"proj": torch.nn.Linear(4, 4), "moe": moe})
        optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
        if how == "by hand":
            model = ignore_moe_params(model).with_bagua([optimizer], "gradient_allreduce")
        else:
            model = model.with_bagua([optimizer], "gradient_allreduce", features={"moe": {}})
        for step in range(3):
            x, _ = _batch(rank, step)
            optimizer.zero_grad()
            out, l_aux, _ = model["moe"](model["proj"](x))
            (out.pow(2).mean() + 0.01 * l_aux).backward()
            optimizer.step()
        weights = _weights(model)
        ignored = list(model._bagua_params_and_buffers_to_ignore)
        model.bagua_shutdown()
        return weights, ignored

    return {how: train(how) for how in ("by hand", "by name")}


def test_moe_trains_as_ignore_moe_params_by_hand() -> None:
    results = run_workers(_moe, 2, timeout=TIMEOUT)
    for seen in results:
        weights, ignored = seen["by name"]
        assert ignored == seen["by hand"][1] and len(ignored) == 4 and all("experts" in n for n in ignored)
        _assert_equal(weights, seen["by hand"][0], "by name")
    ranks = [r["by name"][0] for r in results]
    for name in ranks[0]:  # the dense weights are averaged alike, each rank's experts stay its own
        assert torch.equal(ranks[0][name], ranks[1][name]) == ("experts" not in name), name
