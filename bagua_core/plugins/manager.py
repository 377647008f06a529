"""The plugin manager: adds the core's hook specs (plugins add their packages' own), loads the ``bagua`` entry points, checks them.

Environment:
  ``BAGUA_DISABLE_PLUGIN_AUTOLOAD=1`` loads only the entry points of bagua's own distribution
  (the built-ins), no third-party ones.
  ``BAGUA_DISABLE_PLUGINS=a,b`` skips the entry points named ``a`` and ``b`` (built-in or not).
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import os
import threading

import pluggy

from bagua_core.runtime.exceptions import DuplicateNameError, PluginLoadError
from bagua_core.plugins import hookspecs

__all__ = ["BaguaPluginManager", "get_plugin_manager", "reset_plugin_manager", "disabled_plugin_names", "autoload_enabled"]

_lock = threading.RLock()
_manager: BaguaPluginManager | None = None


class BaguaPluginManager(pluggy.PluginManager):
    """pluggy's manager for the ``bagua`` project; ``add_hookspecs`` adds a module's specs once.

    Every plugin of a package may add the package's spec module (``bagua_add_hookspecs``) so the specs
    are there whichever of its plugins is enabled; the second addition of a module is a no-op.
    """

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self._spec_modules: list[object] = []
        self.distributions: dict[str, str] = {}
        """Plugin name (an entry point's) -> the distribution that provides it."""
        self.packages: dict[str, str] = {}
        """Plugin name (an entry point's) -> the module the entry point names (the package providing the plugin)."""

    def add_hookspecs(self, module_or_class: object) -> None:
        if any(added is module_or_class for added in self._spec_modules):
            return
        super().add_hookspecs(module_or_class)
        self._spec_modules.append(module_or_class)

    def spec_modules(self) -> list[object]:
        """The modules (or classes) whose hook specs were added, the core's first."""
        return list(self._spec_modules)


def autoload_enabled() -> bool:
    return os.environ.get("BAGUA_DISABLE_PLUGIN_AUTOLOAD", "").strip().lower() not in ("1", "true", "yes")


def disabled_plugin_names() -> set[str]:
    raw = os.environ.get("BAGUA_DISABLE_PLUGINS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


def _entry_points() -> list[importlib_metadata.EntryPoint]:
    return list(importlib_metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP))


def _distribution_name(entry_point: importlib_metadata.EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    return dist.metadata["Name"] if dist is not None else "<unknown distribution>"


def _load_entry_points(pm: BaguaPluginManager) -> None:
    disabled = disabled_plugin_names()
    builtin_only = not autoload_enabled()
    seen: dict[str, str] = {}
    for entry_point in _entry_points():
        dist_name = _distribution_name(entry_point)
        if entry_point.name in disabled:
            continue
        if builtin_only and dist_name != hookspecs.PROJECT_NAME:
            continue
        provider = f"{entry_point.value} (distribution {dist_name})"
        if entry_point.name in seen:
            if seen[entry_point.name] == provider:  # the same distribution found twice on sys.path
                continue
            raise DuplicateNameError(
                f"two bagua plugins are both named {entry_point.name!r}: {seen[entry_point.name]} and "
                f"{provider}; uninstall one, or disable one with BAGUA_DISABLE_PLUGINS={entry_point.name}"
            )
        seen[entry_point.name] = provider
        try:
            plugin = entry_point.load()
        except Exception as exc:  # a broken plugin is never hidden
            raise PluginLoadError(
                f"bagua plugin {entry_point.name!r} ({provider}) failed to load: "
                f"{type(exc).__name__}: {exc}. Fix or uninstall it, or skip it with "
                f"BAGUA_DISABLE_PLUGINS={entry_point.name}"
            ) from exc
        if pm.is_registered(plugin):
            continue
        pm.register(plugin, name=entry_point.name)
        pm.distributions[entry_point.name] = dist_name
        pm.packages[entry_point.name] = entry_point.value


def get_plugin_manager() -> BaguaPluginManager:
    """Return the process-wide plugin manager, loading the entry points on first use.

    Example::

        >>> from bagua_core.plugins import get_plugin_manager
        >>> pm = get_plugin_manager()
        >>> "gradient_allreduce" in [name for name, _ in pm.list_name_plugin()]
        True
    """
    global _manager
    with _lock:
        if _manager is None:
            pm = BaguaPluginManager()
            pm.add_hookspecs(hookspecs)
            # historic: every plugin registered from now on (entry points, inline, at run time) is asked
            # at once to add its package's specs, before check_pending validates the implementations
            pm.hook.bagua_add_hookspecs.call_historic(kwargs={"plugin_manager": pm})
            _load_entry_points(pm)
            pm.check_pending()  # a misspelt hook implementation fails here, at start-up
            _manager = pm
        return _manager


def reset_plugin_manager() -> None:
    """Forget the manager so the next use reloads the entry points (tests, or after an install)."""
    global _manager
    with _lock:
        _manager = None
