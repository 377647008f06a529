"""``ReduceOp``: the seed's numbering (SUM=0 ... AVG=10) is part of the public API."""

from __future__ import annotations

import enum

import torch.distributed as dist

__all__ = ["ReduceOp", "to_reduce_op"]


class ReduceOp(enum.IntEnum):
    """Reduction operators of the collectives."""

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    BOR = 7
    BAND = 8
    BXOR = 9
    AVG = 10


_FROM_TORCH = {
    dist.ReduceOp.SUM: ReduceOp.SUM,
    dist.ReduceOp.PRODUCT: ReduceOp.PRODUCT,
    dist.ReduceOp.MIN: ReduceOp.MIN,
    dist.ReduceOp.MAX: ReduceOp.MAX,
    dist.ReduceOp.BOR: ReduceOp.BOR,
    dist.ReduceOp.BAND: ReduceOp.BAND,
    dist.ReduceOp.BXOR: ReduceOp.BXOR,
    dist.ReduceOp.AVG: ReduceOp.AVG,
}

TORCH_OPS = {
    ReduceOp.SUM: dist.ReduceOp.SUM,
    ReduceOp.PRODUCT: dist.ReduceOp.PRODUCT,
    ReduceOp.MIN: dist.ReduceOp.MIN,
    ReduceOp.MAX: dist.ReduceOp.MAX,
    ReduceOp.BOR: dist.ReduceOp.BOR,
    ReduceOp.BAND: dist.ReduceOp.BAND,
    ReduceOp.BXOR: dist.ReduceOp.BXOR,
}


def to_reduce_op(op: object) -> ReduceOp:
    """Accept this project's ``ReduceOp``, its integer value, or ``torch.distributed.ReduceOp``."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, int) and not isinstance(op, bool):
        try:
            return ReduceOp(op)
        except ValueError:
            pass
    else:
        for torch_op, ours in _FROM_TORCH.items():
            try:
                if op == torch_op:
                    return ours
            except TypeError:
                continue
    valid = ", ".join(f"{m.name}={m.value}" for m in ReduceOp)
    raise ValueError(f"unknown reduce op {op!r}; use bagua_core.ReduceOp ({valid}) or torch.distributed.ReduceOp")
