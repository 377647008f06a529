"""``DelegatingImpl``: an impl that forwards every hook of the contract to another impl, ``self.current``.

The hooks forwarded are every public method of :class:`bagua_core.api.AlgorithmImpl`, read from the class when
this module is imported: a hook added to the contract is forwarded with no change here. A subclass overrides the
hooks it handles itself (``auto`` drives its schedule from ``need_reset`` and keeps its choice in ``state_dict``)
and calls ``self.current`` for the rest.

Example::

    >>> class Pick(DelegatingImpl):
    ...     def __init__(self, process_group, config, chosen):
    ...         super().__init__(process_group, config)
    ...         self.current = chosen.reify(process_group)
    >>> Pick(group, config, chosen).init_tensors(module) == chosen_impl.init_tensors(module)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from bagua_core.api import AlgorithmImpl

__all__ = ["CONTRACT_HOOKS", "DelegatingImpl", "forwarded"]

CONTRACT_HOOKS = tuple(name for name, value in vars(AlgorithmImpl).items()
                       if inspect.isfunction(value) and not name.startswith("_"))
"""Every public method of the contract (``AlgorithmImpl``), in the order it defines them."""


def forwarded(name: str) -> Callable[..., Any]:
    """A method calling ``self.current``'s ``name`` with the same arguments."""
    contract = getattr(AlgorithmImpl, name)

    def method(self: DelegatingImpl, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.current, name)(*args, **kwargs)

    method.__name__, method.__qualname__ = name, f"DelegatingImpl.{name}"
    method.__doc__ = f"The current impl's ``{name}`` (``AlgorithmImpl.{name}``)."
    method.__signature__ = inspect.signature(contract)  # type: ignore[attr-defined]
    return method


class DelegatingImpl(AlgorithmImpl):
    """Forwards every hook of the contract to :attr:`current` (module doc)."""

    current: AlgorithmImpl
    """The impl the hooks go to."""


for _name in CONTRACT_HOOKS:
    setattr(DelegatingImpl, _name, forwarded(_name))
