"""The ``bagua`` command (:data:`USAGE`): ``python -m bagua_core.cli``; the console script ``bagua`` is
:mod:`bagua_cli`, which answers ``--help`` without importing torch and hands every command to :func:`main`."""

from __future__ import annotations

import sys

from bagua_core.cli.usage import USAGE, answer_without_a_command
from bagua_core.runtime.exceptions import BaguaError

__all__ = ["USAGE", "main"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    answered = answer_without_a_command(argv)
    if answered is not None:
        return answered
    command, rest = argv[0], argv[1:]
    try:
        if command == "run":
            from bagua_core.cli.launch import run_command

            return run_command(rest)
        if command == "train":
            from bagua_core.cli.launch import train_command

            return train_command(rest)
        if command == "plugins":
            from bagua_core.cli.plugins_command import plugins_command

            return plugins_command(rest)
        if command == "check-config":
            from bagua_core.cli.plugins_command import check_config_command

            return check_config_command(rest)
    except (BaguaError, ValueError) as exc:
        print(f"bagua {command}: error: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(f"{command!r} is in usage.COMMANDS but has no branch here")


if __name__ == "__main__":
    sys.exit(main())
