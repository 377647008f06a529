"""torch.distributed's single-tensor allgather and reduce-scatter under the name that each supported torch
version offers without a warning: torch 2.13 deprecates ``all_gather_into_tensor`` and
``reduce_scatter_tensor`` (a FutureWarning on every call) for ``all_gather_single`` and
``reduce_scatter_single``; the versions before it have only the former.

Example::

    >>> work = all_gather_single(gathered, mine, group=group, async_op=True)
"""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["all_gather_single", "reduce_scatter_single"]

all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
