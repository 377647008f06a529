"""The ``bagua`` command (:data:`USAGE`)."""

from __future__ import annotations

import argparse
import sys

from bagua_core.runtime.exceptions import BaguaError

__all__ = ["USAGE", "main"]

USAGE = """usage: bagua COMMAND [options]

commands:
  bagua run [--config FILE] [--verbose] [torchrun options] script.py [args]
                                      start the script's workers with torch's launcher (torchrun)
  bagua run --fault-tolerant [--replicas K] [--min-replicas N] ... script.py
                                      replicas that train on when one fails
  bagua train [--nproc N] [--algorithm NAME] [--option KEY=VALUE] [--config FILE] ...
                                      the main job: an MLP on the digits data on N local workers
  bagua plugins [--json]              installed algorithms (options, defaults, capabilities) and codecs
  bagua check-config FILE             validate a config file

`bagua COMMAND --help` lists a command's options."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
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
    argparse.ArgumentParser(prog="bagua").error(f"unknown command {command!r}; use run, train, plugins or check-config")
    return 2


if __name__ == "__main__":
    sys.exit(main())
