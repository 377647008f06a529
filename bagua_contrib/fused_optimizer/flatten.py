"""Flat buffers for the parameters (and gradients) of an optimizer, and detection of contiguous runs.

Nothing is communicated here; buffers keep each parameter's dtype and device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bagua_core.lifecycle.state import tensor_state_of

__all__ = ["FlatBuffer", "calculate_mutual_groups", "contiguous_runs", "flatten_param_groups", "storage_view"]


def storage_view(first: torch.Tensor, numel: int) -> torch.Tensor:
    """A 1-D tensor of ``numel`` elements starting where ``first`` starts in its storage."""
    return torch.empty(0, dtype=first.dtype, device=first.device).set_(
        first.untyped_storage(), first.storage_offset(), (numel,))


def _fusable(p: torch.Tensor) -> bool:
    return p.requires_grad and p.layout == torch.strided and p.dim() > 0 and p.numel() > 0


@dataclass
class FlatBuffer:
    """Parameters of one param group (one dtype and device) laid out in ``params_flat``; their gradients
    (when they have one) in ``grads_flat`` at the same offsets."""

    params: list[torch.Tensor]
    params_flat: torch.Tensor
    grads_flat: torch.Tensor
    offsets: list[int] = field(default_factory=list)

    def restore(self) -> None:
        """Make every parameter (and existing gradient) a view of the buffers again, copying in what
        something else moved (``param.data = ...``, a gradient set to a new tensor).

        A parameter of a flattened bagua bucket is left where it is: the bucket owns its layout (its
        gradient, or for weight-communicating algorithms its data, is a view of the bucket's buffer), so
        moving it back would make the two copy each other every step. ``fuse_step`` then fuses only
        what is contiguous in the bucket, as the original does; pass ``do_flatten=False`` to
        ``with_bagua`` to keep the optimizer's layout."""
        for p, off in zip(self.params, self.offsets, strict=True):
            if _in_flattened_bucket(p):
                continue
            n = p.numel()
            if p.data_ptr() != self.params_flat[off:].data_ptr() or not p.is_contiguous():
                view = self.params_flat[off:off + n]
                view.copy_(p.detach().reshape(-1))
                p.data = view.view_as(p)
            grad = p.grad
            if grad is not None and (grad.data_ptr() != self.grads_flat[off:].data_ptr() or not grad.is_contiguous()):
                view = self.grads_flat[off:off + n]
                view.copy_(grad.detach().reshape(-1))
                p.grad = view.view_as(p)


def _in_flattened_bucket(p: torch.Tensor) -> bool:
    state = tensor_state_of(p)
    return state is not None and state.bucket is not None and getattr(state.bucket, "buffer", None) is not None


def flatten_param_groups(optimizer: torch.optim.Optimizer) -> list[FlatBuffer]:
    """Copy the parameters of each group (split by dtype and device) into one buffer and make them views."""
    buffers = []
    for group in optimizer.param_groups:
        by_kind: dict[tuple, list[torch.Tensor]] = {}
        for p in group["params"]:
            if _fusable(p):
                by_kind.setdefault((p.dtype, p.device), []).append(p)
        for (dtype, device), params in by_kind.items():
            offsets, total = [], 0
            for p in params:
                offsets.append(total)
                total += p.numel()
            buffer = FlatBuffer(params, torch.zeros(total, dtype=dtype, device=device),
                                torch.zeros(total, dtype=dtype, device=device), offsets)
            for p, off in zip(params, offsets, strict=True):  # grads that exist are copied, None stay None
                buffer.params_flat[off:off + p.numel()].copy_(p.detach().reshape(-1))
                p.data = buffer.params_flat[off:off + p.numel()].view_as(p)
            buffer.restore()
            buffers.append(buffer)
    return buffers


def _adjacent(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.dtype == b.dtype and a.device == b.device and a.is_contiguous() and b.is_contiguous()
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
            and b.storage_offset() == a.storage_offset() + a.numel())


def contiguous_runs(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Split ``params`` into runs whose data and gradients are each contiguous in one storage (in
    storage order); parameters without a gradient or that cannot be fused are runs of one."""
    candidates = [p for p in params if _fusable(p) and p.grad is not None and p.grad.layout == torch.strided]
    chosen = {id(p) for p in candidates}
    candidates.sort(key=lambda p: (p.untyped_storage().data_ptr(), p.storage_offset()))
    runs: list[list[torch.Tensor]] = []
    for p in candidates:
        if runs and _adjacent(runs[-1][-1], p) and _adjacent(runs[-1][-1].grad, p.grad):
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs + [[p] for p in params if id(p) not in chosen]


def _contiguous_index_groups(tensors: list[torch.Tensor]) -> list[list[int]]:
    """Indices of the tensors that follow each other in memory (by address), runs of two or more."""
    groups: list[list[int]] = []
    run: list[int] = []
    for index in sorted(range(len(tensors)), key=lambda i: tensors[i].data_ptr()):
        if run:
            previous = tensors[run[-1]]
            end = previous.data_ptr() + previous.numel() * previous.element_size()
            if tensors[index].data_ptr() != end:
                if len(run) > 1:
                    groups.append(run)
                run = []
        run.append(index)
    if len(run) > 1:
        groups.append(run)
    return groups


def calculate_mutual_groups(tensors_list: list[list[torch.Tensor]]) -> list[list[int]]:
    """The groups of indices whose tensors are contiguous in memory in every list of ``tensors_list``
    (the lists are parallel: parameters, their gradients, each optimizer state), as the original's
    fused optimizer computes them.

    Example::

        >>> calculate_mutual_groups([params, [p.grad for p in params]])
        [[0, 1, 2]]
    """
    if not tensors_list:
        return []
    size = len(tensors_list[0])
    if any(len(tensors) != size for tensors in tensors_list):
        raise ValueError(f"tensors to calculate mutual groups must have equal lengths, got {[len(t) for t in tensors_list]}")
    groups = _contiguous_index_groups(tensors_list[0])
    for tensors in tensors_list[1:]:
        other = _contiguous_index_groups(tensors)
        groups = [group for group in groups if group in other]
    return groups
