"""Bagua keeps what it adds to a user's object at one attribute, ``_bagua_state``
(``bagua_core.lifecycle.state``): a wrapped module holds exactly one ``_bagua_*`` key in its ``__dict__``
(its ``ModuleState``) through training, autotune, ``find_unused_parameters``, a checkpoint loaded before
wrapping (then the key holds the pending ``ResumedState``), a re-wrap; none after ``bagua_shutdown()``.
Tensors and a fused optimizer hold that one key too. The sources set at most 3 private ``_bagua_*``
attribute names outside the compatibility package and read none through ``getattr``, except the list of
names the user sets (``_bagua_params_and_buffers_to_ignore``)."""

from __future__ import annotations

import pathlib
import re

import torch
import torch.nn.functional as F

from tests.distributed import run_workers
from tests.models import SmallNet, batch

ROOT = pathlib.Path(__file__).resolve().parent.parent
SET_PATTERN = re.compile(r"\b[a-zA-Z_]+\.(_bagua_[a-z_]+) *=[^=]|setattr\([^,]+, *[\"'](_bagua_[a-z_]+)")
GETATTR_PATTERN = re.compile(r"getattr\([^,]+, *[\"'](_bagua_[a-z_]+)")
SCANNED_FOR_SETS = ("bagua_core", "bagua_algorithms", "bagua_codecs", "bagua_contrib", "bagua_examples")
SCANNED_FOR_GETATTR = SCANNED_FOR_SETS + ("benchmarks", "plugins_example", "tests")
USER_SET = "_bagua_params_and_buffers_to_ignore"  # the original's convention: the user lists names to ignore


class WithUnused(SmallNet):
    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed)
        self.unused = torch.nn.Linear(4, 4)  # never in forward: left out with find_unused_parameters


def _keys(obj: object) -> list[str]:
    return sorted(key for key in vars(obj) if key.startswith("_bagua_"))


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int, steps: range) -> None:
    for step in steps:
        optimizer.zero_grad()
        F.cross_entropy(model(batch(rank, step)[0]), batch(rank, step)[1]).backward()
        optimizer.step()


def _lifecycle(rank: int, directory: str) -> dict:
    from bagua_contrib.fused_optimizer import fuse_optimizer
    from bagua_features.checkpoints.checkpoint import load_checkpoint, save_checkpoint
    from bagua_core.lifecycle.module_state import state_of
    from bagua_contrib.ddp import DistributedDataParallel
    from bagua_features import autotune

    seen: dict = {}
    model = WithUnused(seed=0)
    optimizer = fuse_optimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), do_flatten=False)
    seen["before"] = _keys(model)
    ddp = DistributedDataParallel(model, optimizers=[optimizer], algorithm="gradient_allreduce",
                                  find_unused_parameters=True)
    seen["wrapped"] = _keys(model)
    autotune.configure(model, warmup_steps=1, trial_steps=2, bucket_sizes=(64, 1 << 20))
    _train(ddp, optimizer, rank, range(8))
    optimizer.fuse_step()
    state = state_of(model)
    seen["trained"] = _keys(model)
    tuning = next(f for f in state.features if f.name == "autotune")
    seen["tuned"] = type(tuning.tuner).__name__, getattr(model, "bagua_autotune_result", None) is not None
    seen["unused_left_out"] = state.unused.in_use is not None and "unused.weight" not in state.unused.in_use
    seen["tensors"] = sorted({key for p in model.parameters() for key in _keys(p)})
    seen["optimizer"] = _keys(optimizer)
    documented = ("bagua_algorithm", "bagua_optimizers", "bagua_buckets", "bagua_train_step_counter",
                  "process_group", "bagua_module_name", "bagua_capabilities", "_bagua_backend", "bagua_ddp")
    seen["documented"] = [name for name in documented if not hasattr(model, name)]
    save_checkpoint(8, directory, model, optimizer)
    model.bagua_shutdown()
    seen["shut_down"] = _keys(model), state_of(model) is None, hasattr(model, "bagua_algorithm")

    fresh = WithUnused(seed=1)
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    load_checkpoint(directory, fresh, fresh_optimizer)  # before wrapping: kept until with_bagua
    seen["pending"] = _keys(fresh), type(vars(fresh).get("_bagua_state")).__name__, state_of(fresh) is None
    fresh = fresh.with_bagua([fresh_optimizer], "gradient_allreduce")
    try:  # the documented attributes are read-only: only the core writes the state they read
        fresh.bagua_algorithm = None
        seen["assignable"] = True
    except AttributeError:
        seen["assignable"] = False
    seen["resumed"] = _keys(fresh), fresh.bagua_train_step_counter
    _train(fresh, fresh_optimizer, rank, range(8, 10))
    fresh = fresh.with_bagua([fresh_optimizer], {"name": "decentralized", "hierarchical": False})  # re-wrap
    _train(fresh, fresh_optimizer, rank, range(10, 12))
    seen["rewrapped"] = _keys(fresh), state_of(fresh).declaration.name
    fresh.bagua_shutdown()
    seen["after"] = _keys(fresh), sorted({key for p in fresh.parameters() for key in _keys(p)})
    return seen


def test_one_state_attribute_through_the_lifecycle(tmp_path) -> None:
    for seen in run_workers(_lifecycle, 2, str(tmp_path), timeout=180):
        assert seen["before"] == []
        for moment in ("wrapped", "trained"):
            assert seen[moment] == ["_bagua_state"], (moment, seen[moment])
        assert seen["tuned"] == ("Autotuner", True) and seen["unused_left_out"]
        assert seen["tensors"] == ["_bagua_state"] and seen["optimizer"] == ["_bagua_state"]
        assert seen["documented"] == []
        assert seen["shut_down"] == ([], True, False)  # the ModuleState goes, and the attributes read from it
        assert seen["assignable"] is False
        assert seen["pending"] == (["_bagua_state"], "ResumedState", True)
        assert seen["resumed"] == (["_bagua_state"], 8)
        assert seen["rewrapped"] == (["_bagua_state"], "decentralized")
        assert seen["after"] == ([], ["_bagua_state"])  # tensor proxies stay bagua tensors, as before


def names_set(sources: dict[str, str]) -> dict[str, list[str]]:
    """Private ``_bagua_*`` attribute name -> ``path:line`` of each place that sets it."""
    found: dict[str, list[str]] = {}
    for path, source in sources.items():
        for number, line in enumerate(source.splitlines(), 1):
            for match in SET_PATTERN.finditer(line):
                found.setdefault(match.group(1) or match.group(2), []).append(f"{path}:{number}")
    return found


def getattr_reads(sources: dict[str, str]) -> list[str]:
    """``path:line: name`` of each getattr call reading a private ``_bagua_*`` name."""
    return [f"{path}:{number}: {match.group(1)}" for path, source in sources.items()
            for number, line in enumerate(source.splitlines(), 1) for match in GETATTR_PATTERN.finditer(line)]


def _sources(folders: tuple[str, ...]) -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for folder in folders
            for path in sorted((ROOT / folder).rglob("*.py"))}


def test_at_most_three_private_names_are_set() -> None:
    found = names_set(_sources(SCANNED_FOR_SETS))
    assert len(found) <= 3, "private _bagua_* attributes set outside bagua/ (keep bagua's state in one object):\n" + \
        "\n".join(f"{name}: {', '.join(where)}" for name, where in sorted(found.items()))


def test_no_getattr_of_private_names() -> None:
    reads = [read for read in getattr_reads(_sources(SCANNED_FOR_GETATTR)) if not read.endswith(USER_SET)]
    assert not reads, "read bagua's state through its accessor (state_of, tensor_state_of, ...):\n" + "\n".join(reads)


def test_the_scans_find_planted_samples() -> None:
    prefix = "_bag" + "ua_"  # spelled apart so that the scans of this file find nothing here
    planted = {"x.py": f"module.{prefix}hooks = []\nsetattr(t, '{prefix}getter', f)\nif a.{prefix}x == 1: pass\n"
                       f"y = getattr(m, \"{prefix}scheduler\", None)\n"}
    assert names_set(planted) == {f"{prefix}hooks": ["x.py:1"], f"{prefix}getter": ["x.py:2"]}
    assert getattr_reads(planted) == [f"x.py:4: {prefix}scheduler"]
