"""The cost of a sample, by a name a config file can hold: what the feature ``load_balancing_sampler``
balances.

``"len"`` (the length of the sample's first element: the tokens of a sentence), ``"numel"`` (the elements of
its first tensor), ``"sum"`` (the sum of its first tensor, in float64: the ink of an image), or
``"module:function"`` (a function of yours, imported, called with the sample). The first element is the sample
itself when it is not a tuple or list.

Example::

    >>> complexity_function("len")((["a", "long", "sentence"], 1))
    3
    >>> complexity_function("my_project.data:cost")       # my_project.data.cost(sample)
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

import torch

from bagua_core.api import BaguaConfigError

__all__ = ["NAMED_COMPLEXITIES", "check_complexity_name", "complexity_function"]


def _first(sample: Any) -> Any:
    return sample[0] if isinstance(sample, (tuple, list)) else sample


NAMED_COMPLEXITIES: dict[str, Callable[[Any], float]] = {
    "len": lambda sample: len(_first(sample)),
    "numel": lambda sample: torch.as_tensor(_first(sample)).numel(),
    "sum": lambda sample: float(torch.as_tensor(_first(sample), dtype=torch.float64).sum()),
}
"""The named costs (module doc)."""


def check_complexity_name(name: str) -> str:
    """``name`` if it is a named cost or has the form ``module:function``; else ``ValueError``, with a
    guess."""
    if name in NAMED_COMPLEXITIES or (":" in name and all(name.partition(":")[::2])):
        return name
    close = difflib.get_close_matches(name, NAMED_COMPLEXITIES, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    named = ", ".join(map(repr, NAMED_COMPLEXITIES))
    raise ValueError(f"complexity must be one of {named} or 'module:function', got {name!r}{guess}")


def complexity_function(name: str) -> Callable[[Any], float]:
    """The cost function ``name`` stands for (module doc); ``BaguaConfigError`` when it cannot be found."""
    try:
        check_complexity_name(name)
    except ValueError as exc:
        raise BaguaConfigError(f"feature 'load_balancing_sampler' option complexity: {exc}") from None
    if name in NAMED_COMPLEXITIES:
        return NAMED_COMPLEXITIES[name]
    module, _, function = name.partition(":")
    try:
        found = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise BaguaConfigError(f"feature 'load_balancing_sampler' option complexity: cannot import {name!r}: "
                               f"{exc}") from None
    if not callable(found):
        raise BaguaConfigError(f"feature 'load_balancing_sampler' option complexity: {name!r} is not "
                               f"callable")
    return found
