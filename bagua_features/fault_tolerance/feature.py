"""Fault-tolerant mode as the process feature ``fault_tolerant``: turned on by ``bagua run --fault-tolerant``
(``BAGUA_FAULT_TOLERANT=1``) or ``init_process_group(fault_tolerant=...)``; once the replica's own group is up it
marks that group's membership (replicas come and go: what the algorithms read) and starts the replica's runtime,
and every module wrapped in the process trains under the step transaction.

Example::

    >>> bagua.init_process_group(fault_tolerant={"min_replicas": 2})   # or BAGUA_FAULT_TOLERANT=1
    >>> [f.name for f in running_features()]
    ['fault_tolerant']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from bagua_features.fault_tolerance.replica import attach, resolve_options, start
from bagua_features.fault_tolerance.options import FaultTolerantOptions, enabled_by_env
from bagua_core.lifecycle.feature import Feature
from bagua_core.api import WrappedModule
from bagua_core.runtime.membership import Membership

__all__ = ["FaultTolerantFeature"]


class FaultTolerantFeature(Feature):
    """Fault-tolerant mode (``docs/fault_tolerance.md``): a replica fails, the others train on, a replacement
    heals from a live peer."""

    name = "fault_tolerant"
    Config = FaultTolerantOptions
    scope = "process"
    init_argument = "fault_tolerant"

    @classmethod
    def requested(cls, module: torch.nn.Module | None) -> Mapping[str, Any] | None:
        """``BAGUA_FAULT_TOLERANT=1`` (``bagua run --fault-tolerant`` sets it), with the options of the environment."""
        if module is not None or not enabled_by_env():
            return None
        return FaultTolerantOptions.from_env().model_dump(exclude={"name"})

    @classmethod
    def from_init_argument(cls, value: Any) -> Mapping[str, Any] | None:
        """True, a dict of options or ``FaultTolerantOptions`` (completed from the environment); False: off."""
        options = resolve_options(value)
        return None if options is None else options.model_dump(exclude={"name"})

    def process_started(self, group: Any) -> None:
        group.membership = Membership(changes=True, commit="quorum")
        start(self.config)

    def wrapped(self, module: torch.nn.Module) -> None:
        attach(module, lambda wrapped: WrappedModule(wrapped).reset())
