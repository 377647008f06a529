"""The import paths of bagua 0.9's flat core, kept for code written against them: ``import
bagua_core.checkpoint`` (or ``from bagua_core.process_group import new_group``) imports the module's new
home and warns once with a ``DeprecationWarning`` naming it. The new paths (and the names exported from
``bagua_core`` itself, ``docs/api.md``) are the ones to write.

Example::

    >>> import bagua_core.checkpoint                # DeprecationWarning: ... moved to bagua_core.checkpoints.checkpoint
    >>> bagua_core.checkpoint is bagua_core.checkpoints.checkpoint
    True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "install", "new_name"]

MOVED = {
    "bagua_core.agreement": "bagua_core.runtime.agreement",
    "bagua_core.algorithm": "bagua_core.lifecycle.algorithm",
    "bagua_core.autotune": "bagua_core.selection.autotune",
    "bagua_core.bucket": "bagua_core.lifecycle.bucket",
    "bagua_core.bucket_ops": "bagua_core.lifecycle.bucket_ops",
    "bagua_core.capabilities": "bagua_core.lifecycle.capabilities",
    "bagua_core.checkpoint": "bagua_core.checkpoints.checkpoint",
    "bagua_core.checkpoint_files": "bagua_core.checkpoints.files",
    "bagua_core.communication": "bagua_core.runtime.communication",
    "bagua_core.config": "bagua_core.selection.config",
    "bagua_core.env": "bagua_core.runtime.env",
    "bagua_core.exceptions": "bagua_core.runtime.exceptions",
    "bagua_core.failure": "bagua_core.runtime.failure",
    "bagua_core.hook_parameters": "bagua_core.lifecycle.hook_parameters",
    "bagua_core.native": "bagua_core.runtime.native",
    "bagua_core.process_group": "bagua_core.runtime.process_group",
    "bagua_core.single_node": "bagua_core.selection.single_node",
    "bagua_core.tensor": "bagua_core.lifecycle.tensor",
}
"""Old module (or package: its submodules follow it) -> where it lives now."""


def new_name(fullname: str) -> str | None:
    """Where the 0.9 module ``fullname`` lives now (None: not a moved path)."""
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old):]
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new} in bagua 0.10; import it from there (or the names from "
                      f"bagua_core, docs/api.md)", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)  # the module itself: one object under both names
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the alias's; the module keeps its own


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("bagua_core."):
            return None
        new = new_name(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once; ``bagua_core`` does it when imported): a submodule of
    a moved package must not be found again, as a second copy, in the package's new directory."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
