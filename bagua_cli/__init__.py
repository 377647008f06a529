"""The ``bagua`` command (``bagua_cli.usage.USAGE``): the console script ``bagua`` and ``python -m bagua_cli``.

Above every other package: it starts jobs (``run``, ``train``), lists what is installed (``plugins``) and checks
config files (``check-config``). ``bagua --help`` and a misspelt command are answered from :mod:`.usage` alone,
before anything imports torch (which takes seconds); each command imports what it needs when it runs.
"""

from __future__ import annotations

import sys

from bagua_cli.usage import USAGE, answer_without_a_command

__all__ = ["USAGE", "main"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    answered = answer_without_a_command(argv)
    if answered is not None:
        return answered
    command, rest = argv[0], argv[1:]
    from bagua_core.runtime.exceptions import BaguaError

    try:
        if command == "run":
            from bagua_cli.launch import run_command

            return run_command(rest)
        if command == "train":
            from bagua_cli.launch import train_command

            return train_command(rest)
        if command == "plugins":
            from bagua_cli.plugins_command import plugins_command

            return plugins_command(rest)
        if command == "check-config":
            from bagua_cli.plugins_command import check_config_command

            return check_config_command(rest)
    except (BaguaError, ValueError) as exc:
        print(f"bagua {command}: error: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(f"{command!r} is in usage.COMMANDS but has no branch here")
