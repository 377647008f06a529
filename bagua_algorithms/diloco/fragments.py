"""Fragments of the parameters and their staggered synchronisation schedule.

The trainable parameters (whole tensors) are dealt into ``count`` fragments of about equal numbers of
elements: largest tensor first, each into the fragment holding the fewest elements so far, so the largest
fragment exceeds ``total / count`` by at most its smallest tensor (the exchange with the most bytes sets the
peak bandwidth that streaming exists to cut). A fragment need not be contiguous: it is gathered into a flat
buffer of its own either way. The partition is a function of the tensors' sizes in registration order only,
which every rank agrees on before training, so it is the same on every rank.

Fragment ``p`` is synchronised after the inner steps ``t`` (1-based) with
``(t + p * H // count) % H == 0`` and its outer result is merged ``overlap`` inner steps later; with one
fragment that is every H steps (DiLoCo).

Example::

    >>> schedule = Schedule(inner_steps=100, count=4, overlap=1)
    >>> schedule.syncs_at(25), schedule.merges_at(26)      # fragment 3 sends after step 25, merges after 26
    ([3], [3])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_core.api import BaguaConfigError

__all__ = ["split_fragments", "Schedule", "gather_flat", "scatter_flat"]


def split_fragments(params: Sequence[torch.Tensor], count: int) -> list[list[int]]:
    """Indices of ``params`` (ascending) in each of ``count`` non-empty fragments of about equal numel.

    Greedy largest-first (LPT): the bound above holds because a tensor only ever joins the lightest
    fragment, and deciding ties by the index keeps it deterministic on every rank.
    """
    if count > len(params):
        raise BaguaConfigError(f"fragments ({count}) is more than the model's {len(params)} trainable parameter tensors; "
                               f"use at most {len(params)}")
    loads = [0] * count
    fragments: list[list[int]] = [[] for _ in range(count)]
    for index in sorted(range(len(params)), key=lambda i: (-params[i].numel(), i)):
        # lightest first; among equals the one with fewer tensors, so empty tensors too leave none empty
        lightest = min(range(count), key=lambda f: (loads[f], len(fragments[f]), f))
        fragments[lightest].append(index)
        loads[lightest] += params[index].numel()
    return [sorted(fragment) for fragment in fragments]


class Schedule:
    """When each fragment sends its outer gradient and when the result is merged (inner steps)."""

    def __init__(self, inner_steps: int, count: int, overlap: int) -> None:
        self.inner_steps, self.count, self.overlap = inner_steps, count, overlap
        self.offsets = [p * inner_steps // count for p in range(count)]

    def syncs_at(self, step: int) -> list[int]:
        """The fragments that send their outer gradient after inner step ``step``."""
        if step < 1:
            return []
        return [p for p, offset in enumerate(self.offsets) if (step + offset) % self.inner_steps == 0]

    def merges_at(self, step: int) -> list[int]:
        """The fragments whose outer result is merged after inner step ``step``."""
        return self.syncs_at(step - self.overlap)


def _places(flat: torch.Tensor, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each parameter's place in ``flat`` (one after the other), in the parameter's shape."""
    places, at = [], 0
    for param in params:
        places.append(flat[at : at + param.numel()].view(param.shape))
        at += param.numel()
    return places


def gather_flat(params: Sequence[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """Copy ``params`` (any float dtype) one after the other into the flat fp32 ``out`` (one ``_foreach``
    copy over all of them)."""
    torch._foreach_copy_(_places(out, params), [param.detach() for param in params])
    return out


def subtract_flat(flat: torch.Tensor, params: Sequence[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """``flat - params`` into the flat fp32 ``out`` in one pass (no copy of ``params`` first; the same bits as
    ``flat - gather_flat(params, ...)``: the copy to fp32 is exact)."""
    for start, param, place in zip(_places(flat, params), params, _places(out, params)):
        torch.sub(start, param.detach(), out=place)
    return out


def scatter_flat(flat: torch.Tensor, params: Sequence[torch.Tensor]) -> None:
    """Copy the flat ``flat`` back into ``params`` (rounded to their dtype; one ``_foreach`` copy)."""
    with torch.no_grad():
        torch._foreach_copy_(list(params), _places(flat, params))
