"""The fenced blocks of the documents (:func:`blocks_of`, read by ``tests/test_docs_examples.py``), and a
documented command that a test runs and checks, so that it runs once, not twice.

A block of the docs marked ``<!-- run by: tests/test_x.py::test_name -->`` on the line before its fence is
not run by ``tests/test_docs_examples.py``: the named test takes its command from the document with
:func:`command` and checks what it wrote. The command a reader copies is the one the test checks; changing
it in the document changes the test's run. ``test_docs_examples`` checks that the named test exists and
reads that block."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

RUN = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash", "console": "console"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^\s`]*)")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not run|slow|run by)\b\s*:?\s*(?P<reason>.*?)\s*-->\s*$")
ANY_MARKER = re.compile(r"<!--\s*(not run|slow|run by)\b")
NAMED_FILE = re.compile(r"^\s*(?:#|//)\s*(?P<name>[\w.-]+(?:/[\w.-]+)*\.(?:py|toml|yaml|yml|json|sh|txt))\b")


@dataclass(frozen=True)
class Block:
    document: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str | None  # "not run", "slow", "run by" or None
    reason: str

    @property
    def name(self) -> str | None:
        """The file this block is written to, when its first line names one."""
        first = self.code.splitlines()[0] if self.code.strip() else ""
        match = NAMED_FILE.match(first)
        return match.group("name") if match else None

    @property
    def runs(self) -> str | None:
        """How the block runs ("python", "bash", "console"), or None when it is shown or written only."""
        kind = RUN.get(self.lang)
        if kind == "python" and self.name:
            return None
        return kind

    def __str__(self) -> str:
        return f"{self.document}:{self.line}"


def blocks_of(text: str, document: str) -> list[Block]:
    """The fenced blocks of ``text``, with the marker on the line before each fence."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = len(match.group("indent")), match.group("fence"), match.group("lang").lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.match(rf"^\s*{re.escape(fence)}\s*$", lines[i]):
            line = lines[i]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            i += 1
        i += 1  # the closing fence
        marker = MARKER.match(lines[start - 1]) if start > 0 else None
        found.append(Block(document, start + 1, lang, "\n".join(body) + "\n",
                           marker.group("kind") if marker else None, marker.group("reason") if marker else ""))
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
    for block in blocks_of((REPO / document).read_text(encoding="utf-8"), document):
        if block.marker != "run by":
            continue
        commands = [shlex.split(c) for c in block.code.splitlines() if c.strip() and not c.lstrip().startswith("#")]
        for argv in commands:
            if argv[:len(words)] == words:
                found.append((block.line, block.reason, commands, argv[len(words):]))
    if len(found) != 1:
        raise AssertionError(f"{document}: {len(found)} blocks marked '<!-- run by: ... -->' run {program!r}; "
                             f"expected one")
    line, test, commands, args = found[0]
    if current and test != current:
        raise AssertionError(f"{document}:{line} is marked run by {test}, but {current} reads it")
    if len(commands) != 1:
        raise AssertionError(f"{document}:{line}: a block run by a test holds one command, not {len(commands)}")
    return args
