"""A command-line mistake in one line, with a guess: argparse prints its whole usage block (torchrun's is 20
lines) and no "did you mean"; :func:`short_usage_errors` turns the error of any parser (bagua's, torchrun's,
the main job's) into ``ValueError("unrecognized arguments: --algoritm bytegrad (did you mean --algorithm?);
`bagua train --help` lists the options")``, which the ``bagua`` command prints as one line.

Example::

    >>> with short_usage_errors("bagua plugins", parser_flags(parser)):
    ...     args = parser.parse_args(argv)
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import re
import sys
from collections.abc import Iterable, Iterator

__all__ = ["flag_guess", "parser_flags", "short_usage_errors"]

_FLAG = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")
_ERROR = re.compile(r"^(?:.*?): error: (.*)$", re.MULTILINE)


def parser_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> list[str]:
    """Every option string ``parser`` takes (``--nproc-per-node`` and ``--nproc_per_node`` alike)."""
    return [option for action in parser._actions for option in action.option_strings]


def flag_guess(given: str, flags: Iterable[str]) -> str | None:
    """The flag of ``flags`` that ``given`` (``--algoritm``, ``--nprocs=2``) most likely misspells, or None:
    the shortest flag that the given one (without a plural's ``s``) starts, else the closest in spelling."""
    name = given.split("=", 1)[0]
    flags = sorted(set(flags))
    stem = name[:-1] if name.endswith("s") else name
    starting = [flag for flag in flags if len(stem.lstrip("-")) >= 3 and flag.startswith(stem)]
    if starting:
        return min(starting, key=len)
    close = difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
    return close[0] if close else None


def _with_guesses(message: str, flags: list[str]) -> str:
    unknown = message.split("unrecognized arguments:", 1)
    if len(unknown) == 2:
        tokens = [t for t in unknown[1].split() if t.startswith("-")]
        guesses = {t.split("=", 1)[0]: flag_guess(t, flags) for t in tokens}
        said = [(given, guess) for given, guess in guesses.items() if guess]
        if len(said) == 1:
            return f"{message} (did you mean {said[0][1]}?)"
        if said:
            return f"{message} (did you mean " + ", ".join(f"{guess} for {given}" for given, guess in said) + "?)"
    return message


@contextlib.contextmanager
def short_usage_errors(command: str, flags: Iterable[str] = ()) -> Iterator[None]:
    """Run a parse (or a function that parses); an argparse error in it becomes a one-line ``ValueError``
    with a guess among ``flags`` and the flags the parser's usage showed. What the parse wrote to stderr
    otherwise (a warning) is written through; ``--help`` (stdout) and its exit pass unchanged."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    except SystemExit as exc:
        found = _ERROR.findall(captured.getvalue())
        if exc.code in (0, None) or not found:
            sys.stderr.write(captured.getvalue())
            raise
        known = [*flags, *_FLAG.findall(captured.getvalue().split(found[-1])[0])]
        raise ValueError(f"{_with_guesses(found[-1], known)}; `{command} --help` lists the options") from None
    except BaseException:
        sys.stderr.write(captured.getvalue())
        raise
    sys.stderr.write(captured.getvalue())
