"""How many samples a training forward holds, read from its inputs (what an algorithm that weights a rank's
contribution by the data behind it counts).

Example::

    >>> samples_in((torch.zeros(32, 128), torch.zeros(32)))     # the first tensor's first dimension
    32
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["samples_in"]


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None


def samples_in(inputs: Any) -> int:
    """The samples of one forward whose positional arguments are ``inputs`` (a forward pre-hook's): the size of the
    first dimension of the first tensor among them (depth first through tuples, lists and dict values, in order; a
    0-d tensor counts 1), or 1 when they hold no tensor (keyword-only inputs: the forward counts as one sample,
    so counting samples becomes counting forwards)."""
    tensor = _first_tensor(inputs)
    if tensor is None:
        return 1
    return int(tensor.shape[0]) if tensor.dim() > 0 else 1
