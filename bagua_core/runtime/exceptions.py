"""Exceptions raised by the bagua runtime. Every one says what went wrong and what to do."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from pydantic import ValidationError

__all__ = [
    "format_validation_error",
    "BaguaError",
    "RepeatedInitializationError",
    "NotInitializedError",
    "BaguaConfigError",
    "PluginError",
    "PluginLoadError",
    "DuplicateNameError",
    "UnknownNameError",
    "RankMismatchError",
    "JobFailureError",
    "PeerFailureError",
    "CommunicationError",
    "CommunicationTimeoutError",
    "GroupAbortedError",
]


class BaguaError(RuntimeError):
    """Base class of every error raised by bagua."""


class RepeatedInitializationError(BaguaError):
    """``init_process_group`` was called while a default process group already exists."""


class NotInitializedError(BaguaError):
    """A call needs ``bagua.init_process_group()`` to have run first."""


class BaguaConfigError(BaguaError, ValueError):
    """An option or a config file failed validation. The message names the field (and the file)."""


class PluginError(BaguaError):
    """Base class of plugin discovery and registration errors."""


class PluginLoadError(PluginError, ImportError):
    """An installed plugin could not be imported; the message names the plugin and its distribution."""


class DuplicateNameError(PluginError):
    """Two plugins registered the same name; the message names both providers."""


class UnknownNameError(PluginError, KeyError):
    """A name was asked for that no installed plugin registers; the message lists the available names."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class RankMismatchError(BaguaError):
    """Ranks disagree on something they must agree on (options, model shapes, parameter order).
    Raised on every rank after they compared notes, so it is not a failure of one rank
    (``bagua_coordinated``): nobody is left waiting, and the group stays usable."""

    bagua_coordinated = True


class JobFailureError(BaguaError):
    """The job failed on some rank while training; ``failed_rank``, ``where`` and ``cause`` say which
    rank failed first, in what, and why (see :mod:`bagua_core.runtime.failure`)."""

    def __init__(self, message: str, failed_rank: int | None = None, where: str = "", cause: str = "") -> None:
        super().__init__(message)
        self.failed_rank = failed_rank
        self.where = where
        self.cause = cause


class PeerFailureError(JobFailureError):
    """Raised on a healthy rank: another rank failed first, and this rank's collectives cannot complete."""


class CommunicationError(JobFailureError):
    """A collective of this rank failed (a connection was lost) and no rank recorded a cause first."""


class CommunicationTimeoutError(CommunicationError, TimeoutError):
    """A collective of this rank did not complete within ``BAGUA_COMM_TIMEOUT_S``: a peer is hung, much
    slower, or issued a different collective."""


class GroupAbortedError(JobFailureError):
    """This process already failed (or learned that a peer did): bagua issues no further collective."""


def format_validation_error(error: ValidationError, what: str, prefix: str = "", drop: int = 0,
                            allowed: Iterable[str] = ()) -> str:
    """A pydantic validation error as the message of a ``BaguaConfigError``: ``invalid {what}:`` and one
    ``{prefix}field: message`` line per error. ``drop`` leading parts of each location are left out (a
    discriminated union's tag); ``allowed`` field names are listed after an unknown field, so the line
    says what to write instead."""
    allowed = sorted(allowed)
    lines = [f"invalid {what}:"]
    for item in error.errors():
        location = prefix + ".".join(str(part) for part in item.get("loc", ())[drop:])
        message = item.get("msg", "invalid value")
        if item.get("type") == "extra_forbidden" and allowed:
            close = difflib.get_close_matches(str(item.get("loc", ("",))[-1]), allowed, n=1)
            guess = f"; did you mean {close[0]!r}?" if close else ""
            message = f"{message} (unknown field; allowed: {', '.join(allowed)}{guess})"
        elif "input" in item and item.get("type") not in ("missing", "extra_forbidden") and \
                not isinstance(item["input"], (dict, list)) and repr(item["input"]) not in message:
            message = f"{message}, got {_shown(item['input'])}"  # the value echoed back, unless it says it
        lines.append(f"  {location or '(top level)'}: {message}")
    return "\n".join(lines)


def _shown(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
