"""Eager updates (Kale, Douillard, Donchev 2025, arXiv 2502.12996) on a round overlapped with ``overlap_steps``.

At a round's boundary a replica sends its pseudo-gradient ``delta_r`` and, instead of training on from its own
weights until the average lands, continues from a proxy outer step: its own fresh pseudo-gradient mixed with
what the others sent in the round before,

    g~ = (delta_r + others) / R,      others = R * average_prev - contribution_prev     (fp32, in that order)

(``contribution_prev``: what this replica's part of the previous exchange decoded to; in the first round,
with no round before, ``g~ = delta_r``). ``theta~`` is the outer optimizer's step of ``theta_global`` with
``g~``, taken on copies: ``theta_global`` and the outer optimizer's state stay as they were, and when the
average lands ``overlap_steps`` inner steps later the true outer step is taken from them and the replica keeps
what it trained since: ``x = theta_global' + (x_now - theta~)``.

Example::

    >>> proxy = proxy_step(outer, start, proxy_gradient(delta, others, nranks))
    >>> others = others_of(average, contribution, nranks)        # when the average lands
"""

from __future__ import annotations

import copy

import torch

__all__ = ["others_of", "proxy_gradient", "proxy_step"]


def proxy_gradient(delta: torch.Tensor, others: torch.Tensor | None, nranks: int) -> torch.Tensor:
    """``g~``: ``(delta + others) / nranks``, or ``delta`` itself when nothing of the others is known yet."""
    if others is None:
        return delta.clone()
    return torch.add(delta, others).div_(nranks)


def others_of(average: torch.Tensor, contribution: torch.Tensor, nranks: int) -> torch.Tensor:
    """What the other replicas sent, summed: ``nranks * average - contribution`` (fp32)."""
    return average.mul(nranks).sub_(contribution)


def proxy_step(outer: torch.optim.Optimizer, start: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """``theta~``: ``outer``'s step of ``start`` with ``gradient``, returned as a new tensor; ``start`` and the
    optimizer's state are left as they were (only ``start`` moves: the other parameters have no gradient)."""
    state = copy.deepcopy(outer.state_dict())
    saved = start.detach().clone()
    start.grad = gradient
    outer.step()
    start.grad = None
    proxy = start.detach().clone()
    with torch.no_grad():
        start.copy_(saved)
    outer.load_state_dict(state)
    return proxy
