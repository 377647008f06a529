"""This replica's fault-tolerant runtime, or None in fail-fast mode: set by ``bagua_features.fault_tolerance.start``,
read by the package and by :class:`~bagua_features.fault_tolerance.sampler.QuorumSampler` (one module below
both, so the sampler does not import its own package)."""

from __future__ import annotations

from typing import Any

__all__ = ["current_runtime", "set_runtime"]

_runtime: Any = None


def current_runtime() -> Any:
    """This replica's ``FaultTolerantRuntime``, or None in fail-fast mode."""
    return _runtime


def set_runtime(runtime: Any) -> Any:
    """Make ``runtime`` (or None) the current one; returns the one it replaces."""
    global _runtime
    previous, _runtime = _runtime, runtime
    return previous
