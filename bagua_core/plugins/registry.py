"""Registries keyed by name, built from a registration hook (the core's: algorithms, features and codecs; a plugin
package keeps its own next to the hook spec it adds, e.g. topologies and cache stores).

Registries are rebuilt from the plugin manager on every lookup, so a plugin registered or unregistered
at run time (tests do that) is seen at once; the hook calls are cheap.
"""

from __future__ import annotations

import difflib
from typing import Generic, TypeVar

from bagua_core.runtime.exceptions import DuplicateNameError, PluginError, UnknownNameError
from bagua_core.plugins.manager import get_plugin_manager

__all__ = ["NamedRegistry", "algorithm_registry", "codec_registry", "feature_registry", "registration_hooks",
           "REGISTER_PREFIX"]

REGISTER_PREFIX = "bagua_register_"

T = TypeVar("T")


def _describe(cls: type, plugin_name: str) -> str:
    return f"{cls.__module__}.{cls.__qualname__} (plugin {plugin_name!r})"


class NamedRegistry(Generic[T]):
    """Classes registered through ``hook_name``, keyed by their ``name`` attribute."""

    def __init__(self, kind: str, hook_name: str) -> None:
        self.kind = kind
        self.hook_name = hook_name

    def providers(self) -> dict[str, tuple[type[T], str]]:
        """Map each name to ``(class, plugin name)``; raise on a missing or duplicate name."""
        pm = get_plugin_manager()
        hook = getattr(pm.hook, self.hook_name, None)
        if hook is None:  # no plugin added the spec (its package is disabled or absent): nothing registered
            return {}
        found: dict[str, tuple[type[T], str]] = {}
        # pluggy calls the last registered first; walk in registration order for stable messages
        for impl in hook.get_hookimpls():
            for cls in impl.function() or ():
                name = getattr(cls, "name", None)
                if not isinstance(name, str) or not name:
                    raise PluginError(
                        f"{self.kind} class {_describe(cls, impl.plugin_name)} has no `name`: set a class "
                        f"attribute `name = \"...\"`"
                    )
                if name in found and found[name][0] is not cls:
                    other_cls, other_plugin = found[name]
                    raise DuplicateNameError(
                        f"{self.kind} name {name!r} is registered twice: by {_describe(other_cls, other_plugin)} "
                        f"and by {_describe(cls, impl.plugin_name)}"
                    )
                found[name] = (cls, impl.plugin_name)
        return found

    def names(self) -> list[str]:
        return sorted(self.providers())

    def get(self, name: str) -> type[T]:
        providers = self.providers()
        if name not in providers:
            available = ", ".join(sorted(providers)) or "none"
            close = difflib.get_close_matches(str(name), list(providers), n=1)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}{guess}; available: {available}. "
                f"Install the plugin that provides it, or check the spelling"
            )
        return providers[name][0]

    def __contains__(self, name: object) -> bool:
        return name in self.providers()


def registration_hooks() -> dict[str, NamedRegistry]:
    """A registry for every ``bagua_register_<things>`` hook spec added (the core's and the plugin
    packages'), keyed by ``<things>``; what ``bagua plugins`` lists.

    Example::

        >>> sorted(registration_hooks())[:2]
        ['algorithms', 'cache_stores']
    """
    pm = get_plugin_manager()
    found = {}
    for hook_name, caller in sorted(vars(pm.hook).items()):
        if hook_name.startswith(REGISTER_PREFIX) and getattr(caller, "spec", None) is not None:
            key = hook_name[len(REGISTER_PREFIX):]
            found[key] = NamedRegistry(key.replace("_", " "), hook_name)
    return found


algorithm_registry: NamedRegistry = NamedRegistry("algorithm", "bagua_register_algorithms")
codec_registry: NamedRegistry = NamedRegistry("codec", "bagua_register_codecs")
feature_registry: NamedRegistry = NamedRegistry("feature", "bagua_register_features")
