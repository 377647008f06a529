"""The repository stands on its own: its documentation links only inside it.

Scans README.md, docs/*.md, benchmarks/README.md and plugins_example/README* for

- markdown links and images ``[text](target)`` (URLs aside): a relative target must resolve inside the
  repository, exist and be tracked by git (when the checkout is a git one), and a ``#fragment`` must
  name a heading of the target file (GitHub's anchors); an absolute local path is never a valid target;
- paths written in the text (``../somewhere``, ``/work/...``): one that climbs out of the repository,
  or an absolute path into someone's machine (``/work``, ``/home``, ``/root``, ``/Users``, ``/mnt``,
  ``/srv``, ``/opt``), would not exist in a clone. Scratch and system paths in examples (``/tmp/ckpt``,
  ``/dev/net/tun``) are fine.

And no tracked source, script or document names the team's directory beside the checkout. Every
failure names the file and line and says what to do.
"""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

DOCUMENTS = sorted(
    [REPO / "README.md", REPO / "benchmarks" / "README.md", *(REPO / "docs").glob("*.md"),
     *(REPO / "plugins_example").glob("README*")]
)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
TEXT_PATH = re.compile(
    r"(?<![\w.:/-])("
    r"(?:\.\./)+[\w.@*<>-]+(?:/[\w.@*<>-]*)*"  # ../somewhere
    r"|/(?:work|home|root|Users|mnt|srv|opt)/[\w.@*<>/-]*"  # a path into someone's machine
    r")"
)
URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
FENCE = re.compile(r"^\s*(```|~~~)")


@cache
def tracked() -> frozenset[str] | None:
    """Paths git tracks (staged files included), or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return frozenset(p for p in out.split("\0") if p)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    found: list[str] = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
            base = slug(match.group(1))
            count = sum(1 for a in found if a == base or re.fullmatch(re.escape(base) + r"-\d+", a))
            found.append(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def link_problem(document: Path, target: str) -> str | None:
    """What is wrong with the link ``target`` of ``document``, or None."""
    path_part, _, fragment = target.partition("#")
    if path_part.startswith("/"):
        return f"link to the absolute path {target!r}; link a file of the repository by a path relative to this document"
    resolved = (document.parent / path_part).resolve() if path_part else document
    if REPO != resolved and REPO not in resolved.parents:
        return (f"link {target!r} leaves the repository (to {resolved}); a clone has nothing there: bring what "
                "it links into the repository and link that")
    name = resolved.relative_to(REPO).as_posix()
    if not resolved.exists():
        return f"link {target!r}: {name} does not exist; fix the path or add the file"
    files = tracked()
    if files is not None and resolved.is_file() and name not in files:
        return f"link {target!r}: {name} exists here but git does not track it, so a clone lacks it; git add it"
    if files is not None and resolved.is_dir() and resolved != REPO and not any(f.startswith(name + "/") for f in files):
        return f"link {target!r}: the folder {name} holds no tracked file; git add it"
    if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
        return (f"link {target!r}: {name} has no heading with the anchor #{fragment}; "
                f"headings there: {', '.join(sorted(anchors(resolved)))}")
    return None


def web_link_problem(target: str) -> str | None:
    """A link to a web page leaves the repository too (the reader may be offline, the page may move): name
    the package or tool in the text instead, and bring what the reader needs into the repository."""
    if target.startswith("mailto:"):
        return None
    return f"link to the web page {target!r}; the documents link only inside the repository: name it in the text"


def text_path_problem(document: Path, path: str) -> str | None:
    """What is wrong with a path written in the text of ``document`` (not a link), or None."""
    if path.startswith("/"):
        return (f"{path!r} is a path on one machine; a clone has no such path: name a file of the repository "
                "(relative to the repository root) instead")
    resolved = (document.parent / path).resolve()
    if REPO != resolved and REPO not in resolved.parents:
        return (f"{path!r} points outside the repository (to {resolved}); a clone has nothing there: bring it "
                "into the repository and name that")
    return None


def problems_of(document: Path) -> list[str]:
    """``file:line: what is wrong`` for every link and written path of ``document`` that leaves the repository."""
    rel = document.relative_to(REPO)
    problems: list[str] = []
    for number, line in enumerate(document.read_text(encoding="utf-8").splitlines(), 1):
        found = [web_link_problem(m.group(1)) if URL.match(m.group(1)) else link_problem(document, m.group(1))
                 for m in LINK.finditer(line)]
        found += [text_path_problem(document, m.group(1)) for m in TEXT_PATH.finditer(LINK.sub(" ", line))]
        problems += [f"{rel}:{number}: {problem}" for problem in found if problem]
    return problems


def test_the_documents_exist() -> None:
    names = {d.relative_to(REPO).as_posix() for d in DOCUMENTS}
    assert {"README.md", "docs/design.md", "docs/plugins.md", "benchmarks/README.md",
            "plugins_example/README.md"} <= names, names


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.relative_to(REPO).as_posix())
def test_links_stay_inside_the_repository(document: Path) -> None:
    problems = problems_of(document)
    assert not problems, "\n".join(problems)


def test_the_checker_catches_what_it_must(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scanner itself: a bad document inside a scratch repository is reported line by line."""
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "REPO", tmp_path)
    monkeypatch.setattr(this, "tracked", lambda: None)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Step one\n")
    document = tmp_path / "README.md"
    document.write_text(
        "fine: [guide](docs/guide.md#step-one), https://example.org/x named in the text, ``/tmp/ckpt``\n"
        "[out](../outside/DESIGN.md)\n"
        "the card is in `../outside/DESIGN.md`\n"
        "[gone](docs/missing.md)\n"
        "[anchor](docs/guide.md#step-two)\n"
        "[abs](/etc/passwd) and /work/outside/bench/netns.sh\n"
        "[web](https://example.org/x)\n"
    )
    problems = problems_of(document)
    lines = sorted(int(p.split(":")[1]) for p in problems)
    assert lines == [2, 3, 4, 5, 6, 6, 7], problems
    assert all(p.startswith("README.md:") for p in problems), problems


def test_no_tracked_file_names_the_directory_beside_the_checkout() -> None:
    files = tracked()
    if files is None:
        pytest.skip("not a git checkout: nothing to say which files are the repository's")
    beside = ".." + "/shared"  # written in two parts so this file does not match itself
    suffixes = {".py", ".md", ".sh", ".toml", ".cfg", ".txt", ".yaml", ".yml", ".json"}
    found = []
    for name in sorted(files):
        path = REPO / name
        if not (path.suffix in suffixes or path.name in {"Makefile", "setup.sh"}) or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if beside in line:
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, ("these name a directory beside the checkout, which a clone does not have; use the "
                       "repository's own file instead:\n" + "\n".join(found))
