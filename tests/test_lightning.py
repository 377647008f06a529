"""bagua_contrib.lightning: ``Trainer(strategy="bagua")`` and ``BaguaStrategy(algorithm=...)`` on CPU
with ``devices=2``, launched the way a user launches it (Lightning re-runs this file for rank 1).

This module doubles as the Lightning app: ``python tests/test_lightning.py OUT_DIR name,name,...``
fits a tiny LightningModule with Lightning's DDP as the reference, then with every named algorithm,
and writes ``OUT_DIR/rank<r>.json``. One launch covers every algorithm (keeps the test ~30 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning", reason="the `lightning` extra is not installed")

ROOT = Path(__file__).resolve().parents[1]
STEPS = 6
# options keeping each algorithm's interesting phase inside the few steps of the test
OPTIONS: dict[str, dict] = {
    "async": {"sync_interval_ms": 10, "warmup_steps": 2},
    "decentralized": {"hierarchical": False},
    "low_precision_decentralized": {"hierarchical": False},
}
IDENTICAL_ON_ALL_RANKS = {"gradient_allreduce", "bytegrad", "qadam"}


def builtin_algorithms() -> list[str]:
    from bagua_core.plugins import algorithm_registry

    return sorted(name for name, (cls, _) in algorithm_registry.providers().items()
                  if cls.__module__.startswith("bagua_algorithms."))


# --------------------------------------------------------------------------- the app (run as a script)
def _app(out_dir: str, names: list[str]) -> None:
    import lightning.pytorch as pl
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    from bagua_contrib.lightning import BaguaStrategy
    from bagua_core.lifecycle.module_state import state_of
    from bagua_core.runtime.communication import stats

    class Tiny(pl.LightningModule):
        def __init__(self, qadam: bool = False) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
            self.qadam = qadam

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y), sync_dist=True)

        def configure_optimizers(self):
            if self.qadam:
                from bagua_algorithms.q_adam import QAdamOptimizer

                return QAdamOptimizer(self.parameters(), lr=0.01, warmup_steps=3)
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    gen = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(64, 6, generator=gen), torch.randint(0, 3, (64,), generator=gen))

    def fit(strategy, **trainer_options) -> dict:
        torch.manual_seed(dist.get_rank() if dist.is_initialized() else 0)
        model = Tiny(qadam=getattr(strategy, "algorithm_config", None) is not None
                     and strategy.algorithm_config.name == "qadam")
        seen: dict = {}

        class Spy(pl.Callback):
            def on_train_start(self, trainer, pl_module):
                seen["model"] = type(trainer.strategy.model).__name__
                seen["impl"] = getattr(trainer.strategy.model, "bagua_algorithm", None)
                seen["wrapper"] = trainer.strategy.model

            def on_train_end(self, trainer, pl_module):  # before the strategy's teardown unwraps the module
                seen["steps"] = getattr(trainer.strategy.model, "bagua_train_step_counter", None)

        trainer = pl.Trainer(strategy=strategy, accelerator="cpu", devices=2, max_steps=STEPS, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             callbacks=[Spy()], val_check_interval=3, limit_val_batches=2, **trainer_options)
        initial = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        bytes_before = stats.total_bytes()
        trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        gathered = [torch.empty_like(params) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, params)
        impl = seen["impl"]
        averager = getattr(impl, "averager", None)
        return {
            "strategy": type(trainer.strategy).__name__,
            "wrapped_as": seen["model"],
            "impl": type(impl).__name__,
            "global_step": trainer.global_step,
            "world_size": trainer.world_size,
            "finite": bool(torch.isfinite(params).all()),
            "identical_on_all_ranks": all(torch.equal(gathered[0], g) for g in gathered),
            "params": params.tolist(),
            "trained": not torch.equal(params, initial),
            "hooks_removed": state_of(seen["wrapper"]) is None,
            "async_running_after_fit": bool(averager is not None and averager.running),
            "unwrapped": trainer.strategy.model is model,
            "bagua_steps": seen["steps"],  # validation not counted
            "val_loss": float(trainer.callback_metrics["val_loss"]),
            "bagua_bytes": stats.total_bytes() - bytes_before,
        }

    report = {"ddp": fit("ddp")}
    for name in names:
        strategy = "bagua" if name == "gradient_allreduce" else BaguaStrategy(algorithm=name, **OPTIONS.get(name, {}))
        report[name] = fit(strategy)
    report["bagua_instance_flatten_false"] = fit(BaguaStrategy(algorithm="gradient_allreduce", flatten=False))
    report["ddp_accumulate"] = fit("ddp", accumulate_grad_batches=2)
    report["bagua_accumulate"] = fit("bagua", accumulate_grad_batches=2)  # no_sync in accumulating steps
    validated = pl.Trainer(strategy="bagua", accelerator="cpu", devices=2, logger=False, enable_progress_bar=False,
                           enable_model_summary=False).validate(Tiny(), DataLoader(data, batch_size=4), verbose=False)
    report["validate_only"] = validated[0]["val_loss"]
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as fh:
        json.dump(report, fh)


# --------------------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("lightning")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("LOCAL_RANK", None)
    proc = subprocess.run([sys.executable, __file__, str(out), ",".join(builtin_algorithms())], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-8000:]
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return {"ranks": reports}


def test_registered_and_options_validated() -> None:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import StrategyRegistry

    from bagua_contrib.lightning import BaguaStrategy
    from bagua_core.runtime.exceptions import BaguaConfigError, UnknownNameError

    assert "bagua" in StrategyRegistry
    trainer = pl.Trainer(strategy="bagua", accelerator="cpu", devices=2, logger=False)
    assert isinstance(trainer.strategy, BaguaStrategy)
    assert trainer.strategy.algorithm_config.name == "gradient_allreduce"
    strategy = BaguaStrategy(algorithm="gradient_allreduce", hierarchical=True, start_method="spawn")
    assert strategy.algorithm_config.hierarchical and strategy._start_method == "spawn"
    with pytest.raises(UnknownNameError, match="gradient_allreduce"):
        BaguaStrategy(algorithm="no_such_algorithm")
    with pytest.raises(BaguaConfigError, match="hierarchicl"):
        BaguaStrategy(algorithm="gradient_allreduce", hierarchicl=True)


@pytest.mark.xdist_group("lightning")  # the tests of one module-scoped fit share a worker, so it runs once
def test_gradient_allreduce_equals_lightning_ddp(fitted) -> None:
    for report in fitted["ranks"]:
        for key in ("gradient_allreduce", "bagua_instance_flatten_false"):
            ours, ddp = report[key], report["ddp"]
            assert ours["strategy"] == "BaguaStrategy" and ours["wrapped_as"] == "BaguaLightningBaguaModule"
            assert ours["global_step"] == ddp["global_step"] == STEPS and ours["world_size"] == 2
            torch.testing.assert_close(torch.tensor(ours["params"]), torch.tensor(ddp["params"]), rtol=1e-5, atol=1e-6)
            assert abs(ours["val_loss"] - ddp["val_loss"]) < 1e-5
        torch.testing.assert_close(torch.tensor(report["bagua_accumulate"]["params"]),
                                   torch.tensor(report["ddp_accumulate"]["params"]), rtol=1e-5, atol=1e-6)
        assert report["bagua_accumulate"]["bagua_steps"] == 2 * STEPS  # forwards, two per optimizer step
        # accumulating backward passes communicate nothing: the same bytes as without accumulation
        assert report["bagua_accumulate"]["bagua_bytes"] == report["gradient_allreduce"]["bagua_bytes"] > 0
        assert report["validate_only"] > 0  # Trainer.validate with strategy="bagua" (no wrapping)


@pytest.mark.xdist_group("lightning")
@pytest.mark.parametrize("name", builtin_algorithms())
def test_every_builtin_algorithm_trains(fitted, name) -> None:
    first = fitted["ranks"][0][name]
    assert first["impl"] != "NoneType" and first["strategy"] == "BaguaStrategy"
    assert first["global_step"] == STEPS and first["finite"]
    assert first["trained"]
    for report in fitted["ranks"]:
        entry = report[name]
        assert entry["bagua_steps"] == STEPS and entry["val_loss"] == entry["val_loss"]  # not NaN
        assert entry["unwrapped"] and entry["hooks_removed"]  # teardown gave the plain module back
        assert not entry["async_running_after_fit"]  # async: aborted at teardown
        if name in IDENTICAL_ON_ALL_RANKS:
            assert entry["identical_on_all_ranks"], name


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    _app(sys.argv[1], [n for n in sys.argv[2].split(",") if n])
