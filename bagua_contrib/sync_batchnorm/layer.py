"""``SyncBatchNorm``: batch normalisation over the whole distributed batch, on CPU/gloo and on CUDA.

Forward allgathers each rank's per-channel ``(mean, biased var, count)`` (fp32, fp64 for fp64 inputs;
``2C + 1`` values per rank) and combines them exactly (Chan's formula), so ranks may hold different
batch sizes. Backward allreduces (SUM) the per-channel ``sum(dy)`` and ``sum(dy * (x - mean))``
(``2C`` values) to form the input gradient; the weight and bias gradients stay local, like torch's
SyncBatchNorm under DDP (the data-parallel algorithm averages them). Collectives run on the process
group's communication thread so they stay ordered with a wrapped module's bucket operations. In eval
mode, or on one rank, it is a plain BatchNorm.

Example::

    >>> model = SyncBatchNorm.convert_sync_batchnorm(model)       # every BatchNorm*d -> SyncBatchNorm
    >>> model = model.with_bagua([optimizer], "gradient_allreduce")
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import bagua_core
from bagua_contrib.utils.ordered import GroupRef, run_ordered

__all__ = ["SyncBatchNorm"]


def _gather_stats(local: torch.Tensor, group: Any) -> torch.Tensor:
    comm = group.get_global_communicator()
    out = torch.empty(comm.nranks() * local.numel(), dtype=local.dtype, device=local.device)
    bagua_core.allgather(local, out, comm=comm)
    return out.view(comm.nranks(), -1)


def _allreduce_sum(tensor: torch.Tensor, group: Any) -> torch.Tensor:
    bagua_core.allreduce_inplace(tensor, op=bagua_core.ReduceOp.SUM, comm=group.get_global_communicator())
    return tensor


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, group):
        channels = x.shape[1]
        dims = [0, *range(2, x.dim())]
        shape = [1, channels] + [1] * (x.dim() - 2)
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf = x.to(compute)
        count = x.numel() // channels
        if count:
            local = torch.cat([xf.mean(dims), xf.var(dims, unbiased=False), xf.new_tensor([count])])
        else:
            local = xf.new_zeros(2 * channels + 1)
        stats = run_ordered(group, _gather_stats, local.contiguous(), group)
        means, variances, counts = stats[:, :channels], stats[:, channels:2 * channels], stats[:, -1:]
        total = counts.sum()
        if total <= 1:
            raise ValueError(f"SyncBatchNorm needs more than one value per channel over all ranks, got {int(total)}")
        mean = (counts * means).sum(0) / total
        var = (counts * (variances + (means - mean) ** 2)).sum(0) / total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_((var * total / (total - 1)).to(running_var.dtype), alpha=momentum)
        xhat = (xf - mean.view(shape)) * invstd.view(shape)
        y = xhat
        if weight is not None:
            y = y * weight.to(compute).view(shape) + bias.to(compute).view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.total, ctx.group, ctx.shape, ctx.dims = total, group, shape, dims
        ctx.has_bias = bias is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xhat, invstd, weight = ctx.saved_tensors
        shape, dims = ctx.shape, ctx.dims
        dyf = dy.to(xhat.dtype)
        sum_dy = dyf.sum(dims)
        sum_dy_xhat = (dyf * xhat).sum(dims)
        grad_weight = grad_bias = None
        if weight is not None:
            grad_weight = sum_dy_xhat.to(weight.dtype) if ctx.needs_input_grad[1] else None
            grad_bias = sum_dy.to(weight.dtype) if ctx.needs_input_grad[2] and ctx.has_bias else None
        grad_x = None
        if ctx.needs_input_grad[0]:
            reduced = run_ordered(ctx.group, _allreduce_sum, torch.cat([sum_dy, sum_dy_xhat]), ctx.group)
            g_sum_dy, g_sum_dy_xhat = reduced.chunk(2)
            scale = invstd if weight is None else invstd * weight.to(xhat.dtype)
            grad_x = (dyf - (g_sum_dy / ctx.total).view(shape) - xhat * (g_sum_dy_xhat / ctx.total).view(shape))
            grad_x = (grad_x * scale.view(shape)).to(dy.dtype)
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """BatchNorm over the batch of every rank of ``process_group`` (default: bagua's default group)
    for inputs of shape ``(N, C, ...)``."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group: Any = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self._group_ref = GroupRef(process_group)  # survives deepcopy (shared) and pickling (dropped)

    @property
    def process_group(self) -> Any:
        return self._group_ref.group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm expects an input of shape (N, C, ...), got {input.dim()}D")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        running_mean, running_var = (self.running_mean, self.running_var) if keep else (None, None)
        group = self._group_ref.get() if use_batch else None
        if group is None or group.get_global_communicator().nranks() == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias, use_batch, factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, running_mean, running_var, self.eps,
                                            factor, group)

    @classmethod
    def convert_sync_batchnorm(cls, module: torch.nn.Module, process_group: Any = None) -> torch.nn.Module:
        """Return ``module`` with every ``BatchNorm*d`` replaced by a :class:`SyncBatchNorm` holding the
        same parameters, running statistics and mode."""
        converted = module
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and not isinstance(module, cls):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            if module.affine:
                with torch.no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.train(module.training)
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted
