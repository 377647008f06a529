"""The contrib features moved into packages of their own (``bagua_contrib.fused_optimizer``,
``.sync_batchnorm``, ``.load_balancing_sampler``, ``.cached_dataset``; ``.moe`` stayed): every import path of
before still works and gives the same object as the new home, without a warning. Written with the old paths on
purpose."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FUSED = ["FuseState", "fuse_optimizer", "fuse_state_of", "fuse_step", "is_fused_optimizer"]
MOVED = {  # old module -> (new module, the names it re-exports)
    "bagua_contrib.fuse": ("bagua_contrib.fused_optimizer.optimizer", FUSED),
    "bagua_contrib.fuse.optimizer": ("bagua_contrib.fused_optimizer.optimizer",
                                     [*FUSED, "calculate_mutual_groups"]),
    "bagua_contrib.fuse.flatten": ("bagua_contrib.fused_optimizer.flatten",
                                   ["FlatBuffer", "calculate_mutual_groups", "contiguous_runs",
                                    "flatten_param_groups", "storage_view"]),
    "bagua_contrib.load_balancing_data_loader": ("bagua_contrib.load_balancing_sampler.samplers",
                                                 ["LoadBalancingDistributedBatchSampler",
                                                  "LoadBalancingDistributedSampler"]),
    "bagua_contrib.cache_loader": ("bagua_contrib.cached_dataset.cache_loader", ["CacheLoader"]),
}
"""The former modules, now re-exports: exactly these names (``__all__``)."""

SAME = {  # an import path of before -> where the object lives now
    "bagua_contrib.cached_dataset:CachedDataset": "bagua_contrib.cached_dataset.dataset:CachedDataset",
    "bagua_contrib.sync_batchnorm:SyncBatchNorm": "bagua_contrib.sync_batchnorm.layer:SyncBatchNorm",
    "bagua_contrib.moe:MoE": "bagua_contrib.moe.layer:MoE",
    "bagua_contrib.moe:ignore_moe_params": "bagua_contrib.moe.utils:ignore_moe_params",
    "bagua.torch_api.contrib:CacheLoader": "bagua_contrib.cached_dataset.cache_loader:CacheLoader",
    "bagua.torch_api.contrib:CachedDataset": "bagua_contrib.cached_dataset.dataset:CachedDataset",
    "bagua.torch_api.contrib:LoadBalancingDistributedSampler":
        "bagua_contrib.load_balancing_sampler.samplers:LoadBalancingDistributedSampler",
    "bagua.torch_api.contrib:LoadBalancingDistributedBatchSampler":
        "bagua_contrib.load_balancing_sampler.samplers:LoadBalancingDistributedBatchSampler",
    "bagua.torch_api.contrib.cache_loader:CacheLoader":
        "bagua_contrib.cached_dataset.cache_loader:CacheLoader",
    "bagua.torch_api.contrib.cached_dataset:CachedDataset":
        "bagua_contrib.cached_dataset.dataset:CachedDataset",
    "bagua.torch_api.contrib.load_balancing_data_loader:LoadBalancingDistributedSampler":
        "bagua_contrib.load_balancing_sampler.samplers:LoadBalancingDistributedSampler",
    "bagua.torch_api.contrib.sync_batchnorm:SyncBatchNorm":
        "bagua_contrib.sync_batchnorm.layer:SyncBatchNorm",
    "bagua.torch_api.contrib.fuse.optimizer:is_fused_optimizer":
        "bagua_contrib.fused_optimizer.optimizer:is_fused_optimizer",
    "bagua.torch_api.contrib.fuse.optimizer:calculate_mutual_groups":
        "bagua_contrib.fused_optimizer.flatten:calculate_mutual_groups",
    "bagua.torch_api.model_parallel.moe:MoE": "bagua_contrib.moe.layer:MoE",
    "bagua.torch_api.model_parallel.moe:is_moe_param": "bagua_contrib.moe.utils:is_moe_param",
    "bagua.torch_api.model_parallel.moe.layer:MoE": "bagua_contrib.moe.layer:MoE",
    "bagua.torch_api.model_parallel.moe.experts:Experts": "bagua_contrib.moe.experts:Experts",
    "bagua.torch_api.model_parallel.moe.sharded_moe:MOELayer": "bagua_contrib.moe.sharded_moe:MOELayer",
    "bagua.torch_api.model_parallel.moe.utils:is_moe_param": "bagua_contrib.moe.utils:is_moe_param",
}


def _object(path: str) -> object:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_former_module_re_exports_the_new_homes_objects(old: str) -> None:
    new, names = MOVED[old]
    module = importlib.import_module(old)
    assert sorted(module.__all__) == sorted(names)
    assert ".".join(new.split(".")[:2]) in module.__doc__  # it says where the names live now
    home = importlib.import_module(new)
    for name in names:
        assert getattr(module, name) is getattr(home, name), f"{old}.{name}"


@pytest.mark.parametrize("old", sorted(SAME))
def test_an_import_path_of_before_gives_the_same_object(old: str) -> None:
    assert _object(old) is _object(SAME[old])


def test_bagua_contrib_exports_every_name_of_before_from_the_packages() -> None:
    import bagua_contrib

    before = {"CachedDataset": "bagua_contrib.cached_dataset.dataset",
              "CacheLoader": "bagua_contrib.cached_dataset.cache_loader",
              "LoadBalancingDistributedSampler": "bagua_contrib.load_balancing_sampler.samplers",
              "LoadBalancingDistributedBatchSampler": "bagua_contrib.load_balancing_sampler.samplers",
              "fuse_optimizer": "bagua_contrib.fused_optimizer.optimizer",
              "fuse_step": "bagua_contrib.fused_optimizer.optimizer",
              "is_fused_optimizer": "bagua_contrib.fused_optimizer.optimizer",
              "SyncBatchNorm": "bagua_contrib.sync_batchnorm.layer",
              "MoE": "bagua_contrib.moe.layer", "is_moe_param": "bagua_contrib.moe.utils"}
    assert sorted(bagua_contrib.__all__) == sorted(before)
    for name, home in before.items():
        assert getattr(bagua_contrib, name) is getattr(importlib.import_module(home), name), name


def test_the_old_paths_import_without_a_warning() -> None:
    modules = [*MOVED, *{path.partition(":")[0] for path in SAME}]
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    done = subprocess.run([sys.executable, "-W", "error", "-c", code, *modules], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
