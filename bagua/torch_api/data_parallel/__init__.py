"""A torch-DDP-compatible wrapper."""

from __future__ import annotations

from bagua.torch_api.data_parallel.distributed import DistributedDataParallel, to_bagua_process_group
from bagua.torch_api.data_parallel import distributed, functional  # noqa: E402

__all__ = ["DistributedDataParallel", "distributed", "functional", "to_bagua_process_group"]
