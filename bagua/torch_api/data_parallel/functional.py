"""``all_reduce`` differentiable over a torch process group (its backward allreduces the gradient)."""

from __future__ import annotations

from bagua_core.runtime.communication.autograd import ReduceOp, all_reduce, torch_reduce_op_to_bagua

__all__ = ["ReduceOp", "all_reduce", "torch_reduce_op_to_bagua"]
