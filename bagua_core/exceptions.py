"""Exceptions raised by the bagua runtime. Every one says what went wrong and what to do."""

from __future__ import annotations

__all__ = [
    "BaguaError",
    "RepeatedInitializationError",
    "NotInitializedError",
    "BaguaConfigError",
    "PluginError",
    "PluginLoadError",
    "DuplicateNameError",
    "UnknownNameError",
    "RankMismatchError",
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
    """Ranks disagree on something they must agree on (options, model shapes, parameter order)."""
