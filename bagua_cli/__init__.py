"""The ``bagua`` command (``bagua_cli.usage.USAGE``): the console script ``bagua`` and ``python -m bagua_cli``.

Above every other package: it starts jobs (``run``, ``train``), lists what is installed (``plugins``) and checks
config files (``check-config``). ``bagua --help`` and a misspelt command are answered from :mod:`.usage` alone,
before anything imports torch (which takes seconds); each command imports what it needs when it runs.
"""

from __future__ import annotations

import sys

from bagua_cli.usage import USAGE, answer_without_a_command

__all__ = ["USAGE", "main", "program"]


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


JOBS = ("run", "train")
"""The commands that start workers: once one has returned, :func:`program`'s exit is watched."""


def program() -> None:
    """The ``bagua`` console script and ``python -m bagua_cli``: :func:`main` on ``sys.argv``, then exit with its
    status. After a job (``run``, ``train``: its workers have exited and it has reported), the rest of the exit
    is watched (``bagua_core.runtime.exit_watch``, ``BAGUA_EXIT_TIMEOUT_S``): a launcher that hangs on its way
    out writes its threads' stacks to stderr and exits 1, as a worker does. (:func:`main` itself arms nothing: a
    caller's own process is never cut short.)"""
    argv = sys.argv[1:]
    status = main(argv)
    if argv and argv[0] in JOBS:
        from bagua_core.runtime import exit_watch

        exit_watch.arm()
    sys.exit(status)
