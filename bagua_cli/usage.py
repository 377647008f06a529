"""What ``bagua`` answers without a command to run: its usage (``bagua``, ``bagua --help``) and the refusal
of an unknown command, with a guess. Only the standard library: the console script ``bagua`` (:mod:`bagua_cli`)
loads this file without importing the ``bagua_core`` package, which imports torch (seconds), so that these
answers come at once."""

from __future__ import annotations

import difflib
import sys

__all__ = ["COMMANDS", "USAGE", "answer_without_a_command", "suggestion"]

COMMANDS = ("run", "train", "plugins", "check-config")

USAGE = """usage: bagua COMMAND [options]

commands:
  bagua run [--config FILE] [--verbose] [torchrun options] script.py [args]
                                      start the script's workers with torch's launcher (torchrun)
  bagua run --fault-tolerant [--replicas K] [--min-replicas N] ... script.py
                                      replicas that train on when one fails
  bagua train [--nproc N] [--algorithm NAME] [--option KEY=VALUE] [--feature NAME] [--config FILE] ...
                                      the main job: an MLP on the digits data on N local workers
  bagua plugins [--json]              installed algorithms and features (options, defaults) and codecs
  bagua check-config FILE             validate a config file

`bagua COMMAND --help` lists a command's options."""


def suggestion(given: str, choices: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean X?)`` for the closest of ``choices`` to ``given``, or ``''``."""
    close = difflib.get_close_matches(given, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def answer_without_a_command(argv: list[str]) -> int | None:
    """Print the usage (no command, ``-h``/``--help``) or refuse an unknown command, and return the exit
    status; ``None`` when ``argv`` starts with a command, which the caller runs."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] in COMMANDS:
        return None
    print(f"usage: bagua COMMAND [options]  (`bagua --help` lists the commands)\n"
          f"bagua: error: unknown command {argv[0]!r}{suggestion(argv[0], COMMANDS)}; "
          f"the commands are {', '.join(COMMANDS)}", file=sys.stderr)
    return 2
