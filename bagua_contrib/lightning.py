"""PyTorch Lightning integration: ``BaguaStrategy``, registered in Lightning's strategy registry as ``"bagua"``.

Importing this module registers the strategy (install the extra: ``pip install bagua[lightning]``)::

    import lightning.pytorch as pl
    import bagua_contrib.lightning  # noqa: F401  (registers strategy="bagua")
    from bagua_contrib.lightning import BaguaStrategy

    trainer = pl.Trainer(strategy="bagua", accelerator="cpu", devices=2, max_steps=100)
    trainer = pl.Trainer(strategy=BaguaStrategy(algorithm="bytegrad"), accelerator="gpu", devices=4)
    trainer = pl.Trainer(strategy=BaguaStrategy(algorithm="decentralized", hierarchical=False), ...)

The strategy is Lightning's DDP strategy (same launchers, process group, samplers and collectives)
with the model wrapped by ``with_bagua`` instead of ``DistributedDataParallel``: what is
communicated, and in which dtype, is the algorithm's business (see its module). Any registered
algorithm name is accepted; its options are passed as keyword arguments and validated when the
strategy is built. What the strategy does per algorithm follows its declared capabilities
(``bagua_core.lifecycle.capabilities``): one that ``builds_optimizer`` (qadam) needs ``configure_optimizers`` to
return its optimizer (``Algorithm.build_optimizer``); one with ``background_work`` (async) is resumed
when fitting starts and aborted (on every rank) at teardown; one that ``steps_optimizer_in_backward``
(decentralized_dp) gets Lightning's closure run before its hook-only step.
"""

from __future__ import annotations

import contextlib
from typing import Any
from collections.abc import Generator

import torch
from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry
from lightning.pytorch.trainer.states import TrainerFn

import bagua_core as bagua
from bagua_core.lifecycle.module_state import state_of
from bagua_core.runtime.agreement import Prepared, agree_or_raise
from bagua_core.selection.config import algorithm_class_of, algorithm_config_of
from bagua_core.runtime.process_group import get_default_group

__all__ = ["BaguaStrategy", "LightningBaguaModule", "register_bagua_strategy"]


class LightningBaguaModule(torch.nn.Module):
    """Holds the LightningModule so that Lightning's forward redirection runs every ``training_step``
    through this module's ``forward``: bagua's forward pre-hook (step counter, ``need_reset``, the
    algorithm's pre-forward communication) then fires exactly once per step."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    @property
    def training(self) -> bool:  # type: ignore[override]
        # Lightning's evaluation loop calls ``.eval()`` on this wrapper but restores only the
        # LightningModule's mode afterwards: follow the LightningModule so training resumes communicating
        module = self.__dict__.get("_modules", {}).get("module")
        return True if module is None else module.training

    @training.setter
    def training(self, mode: bool) -> None:
        pass  # ``train()``/``eval()`` also set the wrapped module's mode, which this follows

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


class BaguaStrategy(DDPStrategy):
    """Lightning strategy training with a bagua algorithm.

    Args:
        algorithm: a registered algorithm name (``bagua plugins`` lists them).
        flatten: make each bucket's tensors views of one contiguous buffer (``do_flatten``).
        **algorithm_options: the algorithm's options (e.g. ``hierarchical=False``); Lightning's own
            DDP-strategy arguments (``accelerator``, ``parallel_devices``, ``cluster_environment``,
            ``checkpoint_io``, ``precision_plugin``, ``process_group_backend``, ``timeout``,
            ``start_method``) are also accepted.
    """

    strategy_name = "bagua"
    _LIGHTNING_ARGUMENTS = ("accelerator", "parallel_devices", "cluster_environment", "checkpoint_io",
                            "precision_plugin", "process_group_backend", "timeout", "start_method")

    def __init__(self, algorithm: str = "gradient_allreduce", flatten: bool = True, **algorithm_options: Any) -> None:
        lightning_kwargs = {k: algorithm_options.pop(k) for k in self._LIGHTNING_ARGUMENTS if k in algorithm_options}
        super().__init__(**lightning_kwargs)
        self._algorithm_config = algorithm_config_of({"name": algorithm, **algorithm_options})  # fails fast
        self._flatten = flatten

    def _algorithm_class(self) -> Any:
        return algorithm_class_of(self._algorithm_config.name)

    @property
    def algorithm_config(self):
        """The validated config of the algorithm (a pydantic model)."""
        return self._algorithm_config

    def setup_distributed(self) -> None:
        super().setup_distributed()  # torch.distributed, as Lightning's DDP does
        if not bagua.is_initialized():
            bagua.init_process_group()  # adopts the default torch group

    def setup(self, trainer: Any) -> None:
        assert self.accelerator is not None and self.model is not None
        self.accelerator.setup(trainer)
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting and self._layer_sync:
            self.model = self._layer_sync.apply(self.model)
        self.precision_plugin.convert_module(self.model)
        self.model_to_device()
        if fitting:
            # bagua hooks the optimizers, so they exist before the model is wrapped
            self.setup_optimizers(trainer)
            self.setup_precision_plugin()
            from lightning.fabric.utilities.optimizer import _optimizers_to_device

            _optimizers_to_device(self.optimizers, self.root_device)
            self._configure_bagua_model(trainer)
        else:
            # not fitting: nothing to communicate while running, but every rank starts from rank 0's weights
            from lightning.pytorch.overrides.distributed import _sync_module_states

            _sync_module_states(self.model)
            self.setup_precision_plugin()

    def _trainer_settings(self, trainer: Any) -> Prepared:
        """The Trainer's settings that decide which backward passes communicate, what their results
        mean, and how many steps each rank runs (the algorithm and ``flatten`` are compared by
        ``with_bagua``)."""
        names = ("accumulate_grad_batches", "precision", "gradient_clip_val", "gradient_clip_algorithm",
                 "max_steps", "max_epochs")
        return Prepared(None, {f"Trainer {name}": str(getattr(trainer, name, None)) for name in names})

    def _configure_bagua_model(self, trainer: Any) -> None:
        comm = get_default_group().get_global_communicator()
        agree_or_raise(comm, lambda: self._trainer_settings(trainer), what="BaguaStrategy")
        wrapper = LightningBaguaModule(self.model)
        self.model = wrapper.with_bagua(self.optimizers, self._algorithm_config, do_flatten=self._flatten)
        if self.model.bagua_capabilities.background_work:
            self.model.bagua_algorithm.resume(self.model)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Any, model: Any = None, **kwargs: Any) -> Any:
        if not self._algorithm_class().capabilities.steps_optimizer_in_backward:
            return super().optimizer_step(optimizer, closure, model, **kwargs)
        # the algorithm steps inside backward and its optimizer.step() takes no closure: run the closure
        # (forward, backward, Lightning's after-closure hooks) first, then the hook-only step
        result = self.precision_plugin._wrap_closure(model or self.lightning_module, optimizer, closure)
        optimizer.step(**kwargs)
        return result

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator:
        """Gradient accumulation: no communication in the accumulating backward passes."""
        if isinstance(self.model, LightningBaguaModule) and state_of(self.model) is not None:
            with self.model.no_sync():
                yield None
        else:
            yield None

    def teardown(self) -> None:
        model = self.model
        if isinstance(model, LightningBaguaModule):
            capabilities = getattr(model, "bagua_capabilities", None)
            if capabilities is not None and capabilities.background_work:
                model.bagua_algorithm.abort(model)  # stop the background communication on every rank
            model.bagua_shutdown()
            self.model = model.module
        super().teardown()

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        if "bagua" not in strategy_registry:
            strategy_registry.register("bagua", cls, description="bagua: distributed training with a bagua algorithm")


def register_bagua_strategy() -> None:
    """Register ``"bagua"`` in Lightning's strategy registry (done on import; idempotent)."""
    BaguaStrategy.register_strategies(StrategyRegistry)


register_bagua_strategy()
