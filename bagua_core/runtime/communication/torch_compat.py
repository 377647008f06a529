"""torch.distributed's single-tensor allgather and reduce-scatter under the name that each supported torch
version offers without a warning: torch 2.13 deprecates ``all_gather_into_tensor`` and
``reduce_scatter_tensor`` (a FutureWarning on every call) for ``all_gather_single`` and
``reduce_scatter_single``; the versions before it have only the former. The function is looked up in
``torch.distributed`` at each call, so whatever it holds then runs (a test's fault injection replaces it).

Example::

    >>> work = all_gather_single(gathered, mine, group=group, async_op=True)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

__all__ = ["all_gather_single", "reduce_scatter_single"]


def all_gather_single(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any = None,
                      async_op: bool = False) -> Any:
    """Every rank's ``input_tensor`` back to back into ``output_tensor`` (torch's signature)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output_tensor, input_tensor, group=group, async_op=async_op)


def reduce_scatter_single(output: torch.Tensor, input: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None,
                          async_op: bool = False) -> Any:
    """``input`` reduced over the ranks, this rank's part into ``output`` (torch's signature)."""
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return scatter(output, input, op=op, group=group, async_op=async_op)
