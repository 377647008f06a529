"""Model parallelism: mixture of experts."""

from __future__ import annotations

from bagua.torch_api.model_parallel import moe

__all__ = ["moe"]
