"""What a bucket operation may use of the bucket it runs on.

:class:`~bagua_core.lifecycle.bucket.BaguaBucket` provides all of it; the operations are written against this
protocol rather than the class, so that the bucket can append the core's own operation (the
full-precision allreduce) without the two modules importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.runtime.process_group import BaguaProcessGroup

__all__ = ["BucketOperand"]


class BucketOperand(Protocol):
    """A bucket as its operations see it."""

    process_group: BaguaProcessGroup | None
    """The group of the wrapped module the bucket belongs to (None: the default group)."""
    buffer: torch.Tensor | None
    """The contiguous buffer the tensors are views of, when the bucket is flattened."""

    def flattened_view(self) -> torch.Tensor:
        """The bucket's values as one 1-D tensor (the buffer itself when flattened, else a copy)."""

    def write_back(self, flat: torch.Tensor) -> None:
        """Copy ``flat`` (from :meth:`flattened_view`) back into the bucket's tensors."""

    def may_defer(self, op: Any) -> bool:
        """Whether ``op`` may leave its communication in flight past its return."""

    def defer(self, finish: Callable[[], None]) -> None:
        """Run ``finish`` at the end of backward, before the optimizer reads the values."""
