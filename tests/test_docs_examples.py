"""Every fenced code block of the documents runs as written.

The blocks of README.md, benchmarks/README.md and docs/*.md are extracted and run, one test per block:

- a ```python block is run with this Python, unless its first line names a file (``# train.py``): then it
  is a script to be launched, written under that name for the shell blocks after it in the same document
  (a block in another language that names a file, e.g. ``# config.toml``, is written the same way);
- a ```bash / ```sh / ```shell block is run with bash (``-e -o pipefail``); a ```console block runs its
  ``$ `` lines;
- every other language (``text``, ``toml``, ...) is shown, not run; a fence without a language is an error
  (write ``text`` for output).

Each block runs in a fresh temporary directory that holds a symbolic link to every top-level entry of the
repository (so ``bagua_examples/configs/...`` and ``setup.sh`` resolve as in a clone) and the files the
document's earlier blocks named, with ``PYTHONPATH`` set to the repository root, so the code under test is
this checkout's.

A block that cannot run here says so on the line just before its fence, with a reason:
``<!-- not run: needs a GPU -->``. A block that starts workers, or takes more than about 5 s, carries
``<!-- slow: ... -->`` there instead, and its test is marked ``slow`` (``-m "not slow"`` is the quick subset).
A command that a test of its own runs and checks is marked ``<!-- run by: tests/test_x.py::test_name -->``:
that test reads it from the document (``tests/documented.py``), and it is not run a second time here. A
failing block fails its test with the document, the line of its fence, the command and the tail of its
output.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.documented import ANY_MARKER, MARKER, Block, blocks_of

REPO = Path(__file__).resolve().parent.parent

DOCUMENTS = sorted(
    p.relative_to(REPO).as_posix()
    for p in [REPO / "README.md", REPO / "benchmarks" / "README.md", *(REPO / "docs").glob("*.md")]
)

TIMEOUT_S = 240
TAIL_CHARS = 4000


def all_blocks() -> list[Block]:
    return [b for d in DOCUMENTS for b in blocks_of((REPO / d).read_text(encoding="utf-8"), d)]


def workspace(tmp_path: Path, repo: Path, earlier: list[Block]) -> Path:
    """A directory that looks like the repository root, with the files the earlier blocks named."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in repo.iterdir():
        if entry.name != ".git":
            (work / entry.name).symlink_to(entry)
    for block in earlier:
        if block.name:
            target = work / block.name
            if target.is_symlink():
                target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)  # a module of a package: pkg/module.py
            target.write_text(block.code)
    return work


def run_block(block: Block, earlier: list[Block], tmp_path: Path, repo: Path = REPO,
              timeout: float = TIMEOUT_S) -> tuple[int | None, str]:
    """Run ``block`` as the module doc says; return its exit status (None on a timeout) and its output."""
    work = workspace(tmp_path, repo, earlier)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.setdefault("OMP_NUM_THREADS", "1")
    if block.runs == "python":
        (work / "_block.py").write_text(block.code)
        command = [sys.executable, "_block.py"]
    else:
        code = block.code
        if block.runs == "console":
            code = "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ ")) + "\n"
        (work / "_block.sh").write_text(code)
        command = ["bash", "-e", "-o", "pipefail", "_block.sh"]
    proc = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None, proc.communicate()[0]
    finally:
        _kill_group(proc)  # whatever the block started and left behind (workers, a lighthouse)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def failure_message(block: Block, status: int | None, output: str, timeout: float = TIMEOUT_S) -> str:
    what = f"timed out after {timeout:g} s" if status is None else f"exited with status {status}"
    return (f"{block} ({block.lang} block) {what}; fix the block or the code it documents, or mark it "
            f"'<!-- not run: <why> -->' on the line before its fence if it cannot run on a CPU machine.\n"
            f"--- block ---\n{block.code}--- output (tail) ---\n{output[-TAIL_CHARS:]}")


BLOCKS = all_blocks()


def _param(block: Block):
    marks = [pytest.mark.slow] if block.marker == "slow" else []
    return pytest.param(block, id=str(block), marks=marks)


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS if b.runs and b.marker != "run by"])
def test_block_runs(block: Block, tmp_path: Path) -> None:
    if block.marker == "not run":
        pytest.skip(f"{block}: not run: {block.reason}")
    earlier = [b for b in BLOCKS if b.document == block.document and b.line < block.line]
    status, output = run_block(block, earlier, tmp_path)
    assert status == 0, failure_message(block, status, output)


def test_markers_give_reasons_and_stand_before_a_fence() -> None:
    """Every marker names why, stands on the line just before a fence, and marks a block that would run."""
    problems = []
    marked = {(b.document, b.line - 1) for b in BLOCKS if b.marker}
    for document in DOCUMENTS:
        for number, line in enumerate((REPO / document).read_text(encoding="utf-8").splitlines(), 1):
            if ANY_MARKER.search(line):
                match = MARKER.match(line)
                if not match or not match.group("reason"):
                    problems.append(f"{document}:{number}: a marker must read '<!-- not run: <why> -->', "
                                    f"'<!-- slow: <about how long> -->' or '<!-- run by: tests/<file>::<test> -->', "
                                    f"alone on its line")
                elif (document, number) not in marked:
                    problems.append(f"{document}:{number}: the marker is not on the line just before a fence")
    problems += [f"{b}: marked '{b.marker}' but a {b.lang or 'plain'} block does not run anyway"
                 for b in BLOCKS if b.marker and not b.runs
                 and not (b.marker == "not run" and b.lang in ("python", "py") and b.name)]
    assert not problems, "\n".join(problems)
    skipped = [b for b in BLOCKS if b.marker == "not run"]
    print(f"\n{sum(1 for b in BLOCKS if b.runs)} blocks run or skipped, of them {len(skipped)} not run:")
    for block in skipped:
        print(f"  {block}: {block.reason}")


def test_blocks_run_by_a_test_are_read_by_that_test() -> None:
    """A block marked ``<!-- run by: tests/test_x.py::test_name -->`` holds one command, and the test it names
    exists and calls ``documented.command(<this document>, <the start of that command>)``."""
    run_by = [b for b in BLOCKS if b.marker == "run by"]
    problems = []
    for block in run_by:
        path, _, name = block.reason.partition("::")
        if not (REPO / path).is_file() or not name:
            problems.append(f"{block}: run by {block.reason!r}: name an existing test as tests/<file>::<test>")
            continue
        functions = {node.name: node for node in ast.walk(ast.parse((REPO / path).read_text()))
                     if isinstance(node, ast.FunctionDef)}
        if name not in functions:
            problems.append(f"{block}: run by {block.reason}: {path} has no function {name}")
            continue
        lines = [line for line in block.code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        reads = [call for call in ast.walk(functions[name]) if isinstance(call, ast.Call)
                 and getattr(call.func, "attr", getattr(call.func, "id", None)) == "command"
                 and len(call.args) == 2 and all(isinstance(a, ast.Constant) for a in call.args)
                 and call.args[0].value == block.document and len(lines) == 1
                 and shlex.split(lines[0])[:len(shlex.split(call.args[1].value))] == shlex.split(call.args[1].value)]
        if not reads:
            problems.append(f"{block}: run by {block.reason}, which does not call documented.command("
                            f"{block.document!r}, <the start of the block's one command>)")
    assert not problems, "\n".join(problems)
    assert run_by, "no block is marked run by a test: drop this check or tests/documented.py"


def test_every_fence_names_its_language() -> None:
    unnamed = [str(b) for b in BLOCKS if not b.lang]
    assert not unnamed, f"fences without a language (write ```text for output): {', '.join(unnamed)}"


def test_every_named_script_is_launched() -> None:
    """A script block (``# train.py``) is run by a shell block after it in the same document; a module
    (``# acme.py``, ``# pkg/module.py``) that a later script or block imports is used by it."""
    problems = []
    for block in BLOCKS:
        if block.lang in ("python", "py") and block.name and block.marker != "not run":
            later = [b for b in BLOCKS if b.document == block.document and b.line > block.line
                     and b.marker != "not run"]
            parts = block.name.removesuffix(".py").split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            # run from a directory above it (``cd pkg && python script.py``) or imported by a dotted path
            paths = ["/".join(block.name.split("/")[i:]) for i in range(block.name.count("/") + 1)]
            modules = [".".join(parts[i:]) for i in range(len(parts)) if all(p.isidentifier() for p in parts[i:])]
            launched = any(re.search(rf"(?<![\w./-]){re.escape(path)}\b", b.code) for b in later for path in paths
                           if b.runs in ("bash", "console"))
            imported = any(re.search(rf"^\s*(import|from)\s+{re.escape(module)}\b", b.code, flags=re.M)
                           for b in later if b.lang in ("python", "py") for module in modules)
            if not (launched or imported):
                problems.append(f"{block}: the script {block.name} is written but no block after it runs or imports it")
    assert not problems, "\n".join(problems)


def test_the_documents_are_covered() -> None:
    assert "README.md" in DOCUMENTS and "benchmarks/README.md" in DOCUMENTS
    assert {"docs/design.md", "docs/plugins.md", "docs/api.md"} <= set(DOCUMENTS)


def test_a_broken_block_fails_with_its_place_and_output(tmp_path: Path) -> None:
    """The runner itself: a scratch document's failing blocks are reported with document, line and output,
    a named script is launched by a later block, and a marker is read from the line before the fence."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "data.txt").write_text("42\n")
    text = ("# Guide\n\n```python\nprint('fine')\n```\n\n"
            "```python\n# job.py\nimport sys\nfor arg in sys.argv[1:]:\n    print('job', arg)\n```\n\n"
            "- in a list:\n\n  ```bash\n  python job.py 7 && cat data.txt\n  ```\n\n"
            "```bash\necho about to fail\nfalse\necho never\n```\n\n"
            "```python\nraise SystemExit('broken on purpose')\n```\n\n"
            "<!-- not run: needs a GPU -->\n```bash\nnvidia-smi\n```\n")
    blocks = blocks_of(text, "guide.md")
    assert [(b.line, b.lang, b.runs, b.name, b.marker) for b in blocks] == [
        (3, "python", "python", None, None), (7, "python", None, "job.py", None), (16, "bash", "bash", None, None),
        (20, "bash", "bash", None, None), (26, "python", "python", None, None), (31, "bash", "bash", None, "not run")]
    assert blocks[1].code.endswith("    print('job', arg)\n") and blocks[2].code == "python job.py 7 && cat data.txt\n"
    assert blocks[5].reason == "needs a GPU"
    results = []
    for index in (0, 2, 3, 4):
        scratch = tmp_path / f"b{index}"
        scratch.mkdir()
        results.append(run_block(blocks[index], blocks[:index], scratch, repo=repo, timeout=60))
    assert results[0][0] == 0 and "fine" in results[0][1]
    assert results[1][0] == 0 and "job 7" in results[1][1] and "42" in results[1][1]
    assert results[2][0] != 0 and "about to fail" in results[2][1] and "never" not in results[2][1]
    assert results[3][0] != 0 and "broken on purpose" in results[3][1]
    hung = Block("guide.md", 40, "bash", "echo started\nsleep 60\n", None, "")
    scratch = tmp_path / "hung"
    scratch.mkdir()
    status, output = run_block(hung, [], scratch, repo=repo, timeout=2)
    assert status is None and "started" in output
    assert "timed out after 2 s" in failure_message(hung, status, output, timeout=2)
    message = failure_message(blocks[4], *results[3])
    assert message.startswith("guide.md:26 (python block) exited with status 1") and "broken on purpose" in message
