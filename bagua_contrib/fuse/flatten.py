"""Former home of the fused optimizer's flat buffers: they live in
:mod:`bagua_contrib.fused_optimizer.flatten` now; this module re-exports its names, the same objects.

Example::

    >>> from bagua_contrib.fuse.flatten import FlatBuffer   # bagua_contrib.fused_optimizer.flatten's
"""

from __future__ import annotations

from bagua_contrib.fused_optimizer.flatten import (
    FlatBuffer,
    calculate_mutual_groups,
    contiguous_runs,
    flatten_param_groups,
    storage_view,
)

__all__ = ["FlatBuffer", "calculate_mutual_groups", "contiguous_runs", "flatten_param_groups", "storage_view"]
