"""A documented command that a test runs and checks, so that it runs once, not twice.

A block of the docs marked ``<!-- run by: tests/test_x.py::test_name -->`` on the line before its fence is
not run by ``tests/test_docs_examples.py``: the named test takes its command from the document with
:func:`command` and checks what it wrote. The command a reader copies is the one the test checks; changing
it in the document changes the test's run. ``test_docs_examples`` checks that the named test exists and
reads that block."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN_BY = re.compile(r"^\s*<!--\s*run by\s*:\s*(?P<test>\S+?)\s*-->\s*$")


def run_by_blocks(document: str) -> list[tuple[int, str, str]]:
    """``(line of the fence, the test named, the block's text)`` of each block of ``document`` marked run by."""
    lines = (REPO / document).read_text(encoding="utf-8").splitlines()
    found = []
    for number, line in enumerate(lines):
        match = RUN_BY.match(line)
        if match and number + 1 < len(lines) and lines[number + 1].lstrip().startswith("```"):
            end = next(i for i in range(number + 2, len(lines)) if lines[i].strip().startswith("```"))
            found.append((number + 2, match.group("test"), "\n".join(lines[number + 2:end])))
    return found


def command(document: str, program: str) -> list[str]:
    """The arguments that follow ``program`` on the command line of the block of ``document`` that is marked
    run by the test calling this (``PYTEST_CURRENT_TEST``) and whose command starts with ``program``.

    >>> command("benchmarks/README.md", "python -m benchmarks.message_count")  # doctest: +SKIP
    ['--methods', 'decentralized_shift_one,low_precision_decentralized', ...]
    """
    current = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].split("[")[0]
    words = shlex.split(program)
    found = []
    for line, test, text in run_by_blocks(document):
        commands = [shlex.split(c) for c in text.splitlines() if c.strip() and not c.lstrip().startswith("#")]
        for argv in commands:
            if argv[:len(words)] == words:
                found.append((line, test, commands, argv[len(words):]))
    if len(found) != 1:
        raise AssertionError(f"{document}: {len(found)} blocks marked '<!-- run by: ... -->' run {program!r}; "
                             f"expected one")
    line, test, commands, args = found[0]
    if current and test != current:
        raise AssertionError(f"{document}:{line} is marked run by {test}, but {current} reads it")
    if len(commands) != 1:
        raise AssertionError(f"{document}:{line}: a block run by a test holds one command, not {len(commands)}")
    return args
