"""``Feature``: the second kind of plugin beside an algorithm. A name, a validated config, and hooks of the
lifecycle that the core calls at documented points; the core never special-cases one.

A user selects features by name (``with_bagua(optimizers, "bytegrad", features={"sync_batchnorm": {}})``, a config
file's ``[features.<name>]`` tables, ``bagua train --feature NAME``); a feature may also turn itself on
(:meth:`Feature.requested`) or run for the whole process (``scope = "process"``, from ``init_process_group``). The
core calls, in order (each hook's default does nothing): :meth:`~Feature.check` and :meth:`~Feature.agreed_fields`
inside the agreement before the first collective; :meth:`~Feature.setup` and :meth:`~Feature.keeps_own_weights`
before the broadcast and the buckets; :meth:`~Feature.wrapped`; every training step :meth:`~Feature.before_forward`,
:meth:`~Feature.before_optimizer_step` (between the exchange and the optimizer step) and :meth:`~Feature.after_step`;
:meth:`~Feature.dataset` and :meth:`~Feature.sampler` for ``model.bagua_data_loader``; :meth:`~Feature.state_dict`
and :meth:`~Feature.load_state_dict` wherever the module's state is saved and restored (checkpoints, a heal);
:meth:`~Feature.membership_changed` on a new group; :meth:`~Feature.unwrap` at the end.

Example::

    >>> class ClipConfig(FeatureConfig):
    ...     name: Literal["clip"] = "clip"
    ...     max_norm: float = 1.0
    >>> class Clip(Feature):
    ...     name, Config = "clip", ClipConfig
    ...     def before_optimizer_step(self, module):
    ...         torch.nn.utils.clip_grad_norm_(module.parameters(), self.config.max_norm)
    >>> model = model.with_bagua([optimizer], "gradient_allreduce", features={"clip": {"max_norm": 0.5}})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from torch.utils.data import Dataset, Sampler

from bagua_core.runtime.exceptions import BaguaConfigError, format_validation_error

__all__ = ["Feature", "FeatureConfig"]


class FeatureConfig(BaseModel):
    """Base of every feature's options. Subclasses set ``name: Literal["their_name"] = "their_name"``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: str
    """The registered name of the feature."""


class Feature:
    """A feature's declaration and its hooks (module doc). One instance per wrap that runs it (a process
    feature: one per process, handed every module wrapped in it); ``self.config`` holds its validated options."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[FeatureConfig]] = FeatureConfig
    scope: ClassVar[Literal["module", "process"]] = "module"
    """``module``: selected per wrap. ``process``: turned on for the whole process when it starts
    (``init_process_group``: :attr:`init_argument`, or :meth:`requested` with no module), before any rendezvous;
    every module wrapped in that process then runs it, and a wrap cannot turn it on."""
    init_argument: ClassVar[str | None] = None
    """A process feature: the keyword of ``init_process_group`` whose value :meth:`from_init_argument` reads."""
    module_attributes: ClassVar[Mapping[str, Callable[[torch.nn.Module], Any]]] = {}
    """Names this feature adds to every wrapped module, selected or not: ``module.<name>`` is ``function(module)``
    (a method is a function returning the bound call: ``lambda module: functools.partial(metrics, module)``).
    Names start with ``bagua_``."""

    def __init__(self, **options: Any) -> None:
        try:
            self.config = self.Config(name=self.name, **options)
        except ValidationError as exc:
            raise BaguaConfigError(format_validation_error(exc, f"options for feature {self.name!r}",
                                                           allowed=[f for f in self.Config.model_fields if f != "name"])
                                   ) from None

    # --- how it is turned on ------------------------------------------------------------------------------------
    @classmethod
    def requested(cls, module: torch.nn.Module | None) -> Mapping[str, Any] | None:
        """The options with which the feature turns itself on without being selected, or None (the default).
        Asked of every installed module feature at every wrap (``module``: the module being wrapped, with what it
        carries, say a checkpoint loaded before the wrap) and of every process feature when the process starts
        (``module`` None: the environment, say ``BAGUA_FAULT_TOLERANT=1``). Every rank must answer alike (what the
        wrap runs with is compared across ranks)."""
        return None

    @classmethod
    def from_init_argument(cls, value: Any) -> Mapping[str, Any] | None:
        """A process feature: ``init_process_group(<init_argument>=value)`` as options, or None (off). Called
        only when the argument is given (not None)."""
        return None if value is False else {} if value is True else dict(value)

    def canonical_options(self) -> dict[str, Any]:
        """The validated options less ``name``, in JSON types where possible: what the ranks compare."""
        try:
            return self.config.model_dump(mode="json", exclude={"name"})
        except Exception:  # an option without a JSON form: compare the Python values
            return self.config.model_dump(exclude={"name"})

    # --- process scope ------------------------------------------------------------------------------------------
    def process_started(self, group: Any) -> None:
        """A process feature, once ``init_process_group`` built the default ``group`` (agreed across its ranks)."""
        return None

    # --- the wrap -----------------------------------------------------------------------------------------------
    def check(self, module: torch.nn.Module, algorithm: Any) -> None:
        """Refuse, with ``BaguaConfigError`` saying why, to run with ``algorithm`` (the ``Algorithm`` the wrap runs:
        ``type(algorithm).capabilities``) or on ``module``; raised here, inside the agreement, it is raised on every
        rank before the first collective."""
        return None

    def agreed_fields(self, module: torch.nn.Module) -> Mapping[str, Any]:
        """What, besides its options, every rank of the wrap must agree on (name -> comparable value)."""
        return {}

    def setup(self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Once the ranks agreed, before the wrap broadcasts rank 0's weights and builds the buckets: the module
        (not wrapped yet) and the optimizers given to ``with_bagua`` may change here."""
        return None

    def keeps_own_weights(self, module: torch.nn.Module, algorithm: Any) -> bool:
        """Whether every rank keeps its own weights and optimizer state (the wrap broadcasts none of them), given
        the ``Algorithm`` it runs. Asked after :meth:`setup`; every rank must answer alike."""
        return False

    def wrapped(self, module: torch.nn.Module) -> None:
        """The module is wrapped: its hooks are installed, its buckets built."""
        return None

    # --- every step ---------------------------------------------------------------------------------------------
    def before_forward(self, module: torch.nn.Module) -> bool:
        """A training forward begins, the step counter moved. True rebuilds the module's buckets first."""
        return False

    def before_optimizer_step(self, module: torch.nn.Module) -> None:
        """The end of backward: the algorithm's exchange of this step is done (the gradients of a gradient
        algorithm are averaged), no optimizer has stepped. Not called inside ``no_sync()``."""
        return None

    def after_step(self, module: torch.nn.Module) -> None:
        """Every optimizer of the module stepped in this training step (after the algorithm's step-end hook)."""
        return None

    # --- the data ---------------------------------------------------------------------------------------------------
    def dataset(self, module: torch.nn.Module, dataset: Dataset) -> Dataset:
        """``model.bagua_data_loader(dataset, ...)``: the dataset the loader reads (wrap it: a cache). Default: as is."""
        return dataset

    def sampler(self, module: torch.nn.Module, dataset: Dataset, *, num_replicas: int, rank: int, shuffle: bool,
                seed: int, drop_last: bool) -> Sampler | None:
        """``model.bagua_data_loader(dataset, ...)``: the sampler of this rank's share of ``dataset`` (``num_replicas``
        ranks, this one ``rank``; ``shuffle`` by ``seed`` and the epoch; ``drop_last``), or None (the default: torch's
        ``DistributedSampler`` with those arguments). At most one feature of a wrap gives one."""
        return None

    # --- state, membership, the end -------------------------------------------------------------------------------
    def state_dict(self, module: torch.nn.Module) -> dict[str, Any]:
        """What the feature needs to resume exactly (tensors, numbers, strings, lists and dicts of them); saved
        with the module's state wherever it is saved (checkpoints, a heal). Default: nothing."""
        return {}

    def load_state_dict(self, module: torch.nn.Module, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the module is wrapped)."""
        return None

    def membership_changed(self, module: torch.nn.Module) -> None:
        """The module's algorithm runs on a new group from now on (``WrappedModule(module).process_group``: a new
        quorum's in fault-tolerant mode)."""
        return None

    def unwrap(self, module: torch.nn.Module) -> None:
        """``bagua_shutdown()``, or a re-wrap: release what the feature holds for the module."""
        return None

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.config.model_dump(exclude={"name"}).items())
        return f"{type(self).__name__}({options})"
