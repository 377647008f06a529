"""The options of fault-tolerant mode, from ``init_process_group(fault_tolerant=...)`` or the environment
that ``bagua run --fault-tolerant`` sets for its workers.

Example::

    >>> FaultTolerantOptions.from_env({"BAGUA_FAULT_TOLERANT": "1", "TORCHFT_LIGHTHOUSE": "http://h:29510"})
    FaultTolerantOptions(name='fault_tolerant', lighthouse='http://h:29510', min_replicas=1, timeout_s=30.0, ...)
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError, model_validator

from bagua_core.lifecycle.feature import FeatureConfig
from bagua_core.runtime.exceptions import BaguaConfigError, format_validation_error

__all__ = ["FaultTolerantOptions", "ENV_FLAG", "address_towards", "enabled_by_env"]

ENV_FLAG = "BAGUA_FAULT_TOLERANT"
_ENV = {  # option -> environment variable (set by `bagua run --fault-tolerant`)
    "lighthouse": "TORCHFT_LIGHTHOUSE",
    "min_replicas": "BAGUA_FT_MIN_REPLICAS",
    "timeout_s": "BAGUA_FT_TIMEOUT_S",
    "quorum_timeout_s": "BAGUA_FT_QUORUM_TIMEOUT_S",
    "replica_id": "BAGUA_FT_REPLICA_ID",
    "hang_timeout_s": "BAGUA_FT_HANG_TIMEOUT_S",
    "host": "BAGUA_FT_HOST",
}


def address_towards(url: str) -> str:
    """This host's address on the route to ``url``'s host (no packet is sent): where a replica's servers
    listen when nothing else says. Loopback when the route cannot be found."""
    from urllib.parse import urlparse

    host = urlparse(url).hostname or "127.0.0.1"
    try:
        family = socket.getaddrinfo(host, None)[0][0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def enabled_by_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``BAGUA_FAULT_TOLERANT`` asks for fault-tolerant mode (``1``/``true``/``yes``)."""
    value = (environ if environ is not None else os.environ).get(ENV_FLAG, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


class FaultTolerantOptions(FeatureConfig):
    """What a replica needs to take part in fault-tolerant training: the options of the process feature
    ``fault_tolerant``."""

    name: Literal["fault_tolerant"] = "fault_tolerant"
    """The feature's name."""
    lighthouse: str = ""
    """Address of the torchft lighthouse (``http://host:port``); ``bagua run --fault-tolerant`` starts one or
    joins ``--lighthouse``. Environment: ``TORCHFT_LIGHTHOUSE``."""
    min_replicas: int = 1
    """A step commits only with at least this many replicas in its quorum (``BAGUA_FT_MIN_REPLICAS``)."""
    timeout_s: float = 30.0
    """A collective between replicas, a commit decision or a state transfer that takes longer fails the step
    (a hung replica is then left out of the next quorum). A replica's ranks wait twice this for each other
    in the commit decision (a sibling may still be waiting this long for a collective that failed).
    ``BAGUA_FT_TIMEOUT_S``."""
    quorum_timeout_s: float = 120.0
    """How long a replica waits for a quorum of ``min_replicas`` before it raises (``BAGUA_FT_QUORUM_TIMEOUT_S``)."""
    hang_timeout_s: float = 300.0
    """A step still running this long after its quorum formed means this replica hung: it leaves the job
    (exit code 75) so the others go on; its launcher restarts it (``BAGUA_FT_HANG_TIMEOUT_S``)."""
    replica_id: str = ""
    """A name for this replica in the logs (torchft makes it unique); default: ``replica_<pid>``."""
    host: str = ""
    """The address this replica's own server (torchft's manager) listens on and is reached at
    (``BAGUA_FT_HOST``, set by ``bagua run --fault-tolerant``); default: this host's address on the route to
    the lighthouse (loopback for a lighthouse on this host)."""

    @model_validator(mode="after")
    def _check(self) -> FaultTolerantOptions:
        if not isinstance(self.min_replicas, int) or self.min_replicas < 1:
            raise BaguaConfigError(f"fault-tolerant option min_replicas must be a positive integer, got "
                                   f"{self.min_replicas!r}")
        for name in ("timeout_s", "quorum_timeout_s", "hang_timeout_s"):
            value = getattr(self, name)
            if not value > 0:
                raise BaguaConfigError(f"fault-tolerant option {name} must be > 0 seconds, got {value!r}")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> FaultTolerantOptions:
        """The options from the environment, then ``overrides`` (the arguments given in code win)."""
        environ = environ if environ is not None else os.environ
        values: dict[str, Any] = {}
        for field, var in _ENV.items():
            raw = environ.get(var, "").strip()
            if not raw:
                continue
            try:
                values[field] = int(raw) if field == "min_replicas" else float(raw) if field.endswith("_s") else raw
            except ValueError:
                raise BaguaConfigError(f"environment variable {var}={raw!r} is not a number (fault-tolerant option "
                                       f"{field})") from None
        values.update({k: v for k, v in overrides.items() if v is not None and k != "name"})
        unknown = sorted(set(values) - set(_ENV))
        if unknown:
            raise BaguaConfigError(f"unknown fault-tolerant option(s) {unknown}; valid: {sorted(_ENV)}")
        try:
            options = cls(**values)
        except ValidationError as exc:
            raise BaguaConfigError(format_validation_error(exc, "fault-tolerant options")) from None
        if not options.lighthouse:
            raise BaguaConfigError("fault-tolerant mode needs a lighthouse: start the job with `bagua run "
                                   "--fault-tolerant` (it starts one), or set TORCHFT_LIGHTHOUSE=http://host:port, or pass "
                                   "init_process_group(fault_tolerant={'lighthouse': ...})")
        if not options.replica_id:
            options = options.model_copy(update={"replica_id": f"replica_{os.getpid()}"})
        if not options.host:
            options = options.model_copy(update={"host": address_towards(options.lighthouse)})
        return options
