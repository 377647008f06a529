"""Import paths that moved, declared by the packages that hold them now: entry points of ``bagua.moved``, each
named by the old path: a module path (``"bagua_core.checkpoint" = "bagua_features.checkpoints.checkpoint"``: imported as its new home,
under both names, with a ``DeprecationWarning``; a package's submodules follow it), or a name ``bagua_core`` still
offers (``"bagua_core.save_checkpoint" = "bagua_features.checkpoints:save_checkpoint"``; no warning). The core
names none of them: what moved out of it is declared by where it went.

Example::

    >>> import bagua_core.checkpoint          # DeprecationWarning: ... moved to bagua_features.checkpoints.checkpoint
    >>> bagua_core.save_checkpoint.__module__
    'bagua_features.checkpoints.checkpoint'
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["ENTRY_POINT_GROUP", "install", "moved_modules", "moved_names", "new_name", "offered_name"]

ENTRY_POINT_GROUP = "bagua.moved"


@functools.lru_cache(maxsize=1)
def _declared() -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    modules: dict[str, str] = {}
    names: dict[str, tuple[str, str]] = {}
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.attr:
            names[entry.name] = (entry.module, entry.attr)
        else:
            modules[entry.name] = entry.module
    return modules, names


def moved_modules() -> dict[str, str]:
    """Old module path -> where it lives now, as the installed packages declare it."""
    return dict(_declared()[0])


def moved_names() -> dict[str, tuple[str, str]]:
    """``package.name`` offered by a package whose object lives elsewhere -> ``(module, attribute)``."""
    return dict(_declared()[1])


def new_name(fullname: str) -> str | None:
    """Where the moved module ``fullname`` lives now (None: not a moved path)."""
    for old, new in _declared()[0].items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old):]
    return None


def offered_name(package: str, name: str) -> Any:
    """``package.name`` where a package above declares it (``AttributeError`` when none does)."""
    where = _declared()[1].get(f"{package}.{name}")
    if where is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(importlib.import_module(where[0]), where[1])


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}; import it from there (or the names from bagua_core, "
                      f"docs/api.md)", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)  # the module itself: one object under both names
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the alias's; the module keeps its own


class _MovedFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` for a submodule of a moved package (it must not be found again, as a second copy,
    in the package's new directory); last for a moved path itself (nothing else finds it): the entry points are
    read only when one is imported."""

    def __init__(self, last: bool) -> None:
        self.last = last

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        parent = fullname.rpartition(".")[0]
        if not parent or (not self.last and not isinstance(sys.modules.get(parent), ModuleType)):
            return None
        if not self.last and getattr(sys.modules[parent], "__name__", parent) == parent:
            return None  # the parent is not an alias: the usual finders find its submodules
        new = new_name(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the two finders on ``sys.meta_path`` (once; ``bagua_core`` does it when imported)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder(last=False))
        sys.meta_path.append(_MovedFinder(last=True))
