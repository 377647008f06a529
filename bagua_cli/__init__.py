"""The ``bagua`` console script. Its usage, and the refusal of an unknown command, come from
``bagua_core/cli/usage.py``, loaded here by its path: importing the ``bagua_core`` package imports torch, which
takes seconds, and ``bagua --help`` should answer at once. A command is run by :func:`bagua_core.cli.main`
(``python -m bagua_core.cli`` is the same command)."""

from __future__ import annotations

import importlib.util
import os
import sys

__all__ = ["main"]


def _usage_module():
    package = importlib.util.find_spec("bagua_core")  # a top-level package is found without being imported
    if package is None or not package.submodule_search_locations:
        return None
    path = os.path.join(list(package.submodule_search_locations)[0], "cli", "usage.py")
    spec = importlib.util.spec_from_file_location("bagua_core_cli_usage", path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = _usage_module()
    answered = usage.answer_without_a_command(argv) if usage is not None else None
    if answered is not None:
        return answered
    from bagua_core.cli import main as run_command

    return run_command(argv)
