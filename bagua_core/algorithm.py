"""``Algorithm`` (a declaration: its validated config) and ``AlgorithmImpl`` (the lifecycle hooks).

What the core calls, in order, when a module is wrapped (see DESIGN.md):
broadcast from rank 0 -> ``init_tensors`` -> ``tensors_to_buckets`` -> ``init_operations`` per bucket;
per-parameter ``init_backward_hook``; ``init_post_backward_hook`` at the end of backward;
``init_post_optimizer_step_hook`` after ``optimizer.step``; before every forward the step counter
is increased, ``need_reset`` asked (True redoes tensors/buckets/operations), then
``init_forward_pre_hook``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar
from collections.abc import Callable, Sequence

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from bagua_core import env
from bagua_core.bucket import BaguaBucket
from bagua_core.errors_format import format_validation_error
from bagua_core.exceptions import BaguaConfigError

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.process_group import BaguaProcessGroup

__all__ = ["AlgorithmConfig", "Algorithm", "AlgorithmImpl", "split_into_buckets"]


class AlgorithmConfig(BaseModel):
    """Base of every algorithm's options. Subclasses set ``name: Literal["their_name"] = "their_name"``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: str
    """The registered name of the algorithm."""


class Algorithm(abc.ABC):
    """A declaration of an algorithm: its name and validated options; ``reify`` builds the impl."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig

    def __init__(self, **options: Any) -> None:
        try:
            self.config = self.Config(name=self.name, **options)
        except ValidationError as exc:
            raise BaguaConfigError(format_validation_error(exc, f"options for algorithm {self.name!r}")) from None

    def __getattr__(self, item: str) -> Any:
        config = self.__dict__.get("config")
        if config is not None and item in type(config).model_fields:
            return getattr(config, item)
        raise AttributeError(f"{type(self).__name__} has no attribute {item!r}")

    @classmethod
    def from_config(cls, config: AlgorithmConfig, optimizers: Sequence[torch.optim.Optimizer] = ()) -> Algorithm:
        """Build the algorithm from a validated config. ``optimizers`` are those given to ``with_bagua``
        (an algorithm that needs its own optimizer, like qadam, finds it there)."""
        return cls(**config.model_dump(exclude={"name"}))

    @abc.abstractmethod
    def reify(self, process_group: BaguaProcessGroup) -> AlgorithmImpl:
        """Create the implementation bound to ``process_group``."""

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.config.model_dump(exclude={"name"}).items())
        return f"{type(self).__name__}({options})"


def split_into_buckets(
    tensors: Sequence[torch.Tensor], bucket_size: int, do_flatten: bool, name_prefix: str = "bucket", alignment: int = 1
) -> list[BaguaBucket]:
    """Split tensors, in order, into buckets of about ``bucket_size`` bytes (a new bucket also starts
    where the dtype or device of the effective tensors changes)."""
    buckets: list[BaguaBucket] = []
    current: list[torch.Tensor] = []
    current_bytes = 0

    def close() -> None:
        nonlocal current, current_bytes
        if current:
            buckets.append(BaguaBucket(current, f"{name_prefix}_{len(buckets)}", do_flatten, alignment))
        current, current_bytes = [], 0

    for tensor in tensors:
        effective = tensor.bagua_getter_closure()
        if current:
            first = current[0].bagua_getter_closure()
            if first.dtype != effective.dtype or first.device != effective.device:
                close()
        current.append(tensor)
        current_bytes += effective.numel() * effective.element_size()
        if current_bytes >= bucket_size:
            close()
    close()
    return buckets


def _grad_of(param: torch.Tensor) -> torch.Tensor:
    return param.grad


def _set_grad(param: torch.Tensor, value: torch.Tensor) -> None:
    param.grad = value


class AlgorithmImpl:
    """The hooks of an algorithm. The defaults implement plain bucketed gradient communication."""

    def __init__(self, process_group: BaguaProcessGroup) -> None:
        self.process_group = process_group

    def need_reset(self) -> bool:
        """Asked before every forward; True rebuilds tensors, buckets and operations."""
        return False

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        """The tensors to communicate: parameters in reverse registration order, effective tensor ``.grad``."""
        tensors = []
        for name, param in reversed(bagua_module.bagua_named_parameters()):
            param.bagua_ensure_grad()
            tensors.append(
                param.ensure_bagua_tensor(name, bagua_module.bagua_module_name, _grad_of, _set_grad)
            )
        return tensors

    def tensors_to_buckets(self, tensors: list[torch.Tensor], do_flatten: bool) -> list[BaguaBucket]:
        """Split by the bucket size (``BAGUA_DEFAULT_BUCKET_SIZE``), in order."""
        bucket_size = getattr(self, "bucket_size", None) or env.get_default_bucket_size()
        return split_into_buckets(tensors, bucket_size, do_flatten)

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        """Append the bucket's communication operations (none by default)."""
        bucket.clear_ops()

    def init_forward_pre_hook(self, bagua_module: torch.nn.Module) -> Callable[[Any], None]:
        def hook(inputs: Any) -> None:
            return None

        return hook

    def init_backward_hook(self, bagua_module: torch.nn.Module) -> Callable[[str, torch.nn.Parameter], None]:
        """Called with each parameter once its gradient is accumulated: mark it ready."""

        def hook(parameter_name: str, parameter: torch.nn.Parameter) -> None:
            if parameter.is_bagua_tensor() and parameter._bagua_bucket is not None:
                parameter.bagua_mark_communication_ready()

        return hook

    def init_post_backward_hook(self, bagua_module: torch.nn.Module) -> Callable[[], None]:
        """Runs at the end of backward: by default launches what is left and waits for it."""

        def hook() -> None:
            bagua_module.bagua_wait_for_communication()

        return hook

    def init_post_optimizer_step_hook(self, bagua_module: torch.nn.Module) -> Callable[[torch.optim.Optimizer], None]:
        def hook(optimizer: torch.optim.Optimizer) -> None:
            return None

        return hook

    def shutdown(self, bagua_module: torch.nn.Module) -> None:
        """Release what the impl started (threads, groups) when the module is re-wrapped or closed."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """What this rank needs, beyond the model and its optimizers, to resume exactly (tensors,
        numbers, strings, lists and dicts of them). ``bagua_core.checkpoint`` saves it per rank when it
        is not empty. Default: no state."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (called by ``load_checkpoint`` after the model and
        the optimizers were loaded, on every rank with its own state)."""
        if state:
            raise BaguaConfigError(f"{type(self).__name__} keeps no state, but the checkpoint holds algorithm state "
                                   f"with keys {sorted(state)}")
