"""The launcher's last lines say why a worker died, also when it died before bagua's failure handling
could record it: an import error at the script's top, a missing script (bagua_cli/worker_logs.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bagua_cli.worker_logs import last_error

BAGUA = [sys.executable, "-m", "bagua_cli"]


def _run(args: list[str], cwd, timeout: float = 120, text: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(BAGUA + args, capture_output=True, text=text, timeout=timeout, env=env, cwd=cwd)


def test_import_error_at_the_top_of_the_script(tmp_path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import os\nimport bagua_no_such_module_here\n")
    result = _run(["run", "--standalone", "--nproc_per_node=2", str(script)], cwd=tmp_path)
    assert result.returncode == 1
    last = result.stdout.strip().splitlines()
    assert last[-1].startswith("bagua: workers failed; first failure: rank ")
    assert last[-1].endswith("(exit code 1): ModuleNotFoundError: No module named 'bagua_no_such_module_here'")
    assert "To enable traceback" not in result.stdout
    # the traceback's frames above it, and the worker's stderr still reached ours as it came
    assert f'File "{script}", line 2, in <module>' in result.stdout
    # (the other rank may be stopped by the agent before it gets as far)
    assert "ModuleNotFoundError: No module named 'bagua_no_such_module_here'" in result.stderr


@pytest.mark.parametrize("mode", [[], ["--fault-tolerant", "--replicas", "2"]], ids=["fail-fast", "fault-tolerant"])
def test_missing_script_is_reported_before_any_worker_starts(tmp_path, mode: list[str]) -> None:
    """Once, in a line, with the folder it was looked for in: no rendezvous, no lighthouse, no worker."""
    result = _run(["run", *mode, "--standalone", "--nproc_per_node=2", "no_such_script.py"], cwd=tmp_path,
                  timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"bagua run: error: no_such_script.py (in {tmp_path}) was not found: no worker was started"]


def test_a_module_is_not_checked_as_a_script(tmp_path) -> None:
    result = _run(["run", "--standalone", "--nproc_per_node=1", "-m", "json.tool", "--help"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_progress_output_passes_through_unchanged(tmp_path) -> None:
    script = tmp_path / "progress.py"
    script.write_text("import os, sys\nif os.environ['RANK'] == '0':\n"
                      "    sys.stderr.write('step 1\\rstep 2\\rdone\\n'); sys.stderr.flush()\nprint('out', flush=True)\n")
    result = _run(["run", "--standalone", "--nproc_per_node=2", str(script)], cwd=tmp_path, text=False)
    assert result.returncode == 0, result.stderr
    assert b"step 1\rstep 2\rdone\n" in result.stderr  # bytes as written: carriage returns kept, no prefixes
    assert result.stdout.count(b"out") == 2


def test_last_error_picks_the_last_traceback() -> None:
    stderr = ("W1124 some warning\nTraceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n"
              "    f()\nKeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
              "Traceback (most recent call last):\n  File \"a.py\", line 3, in <module>\n    g()\n"
              "RuntimeError: the real cause\nW1124 a warning printed at exit\n")
    error, context = last_error(stderr)
    assert error == "RuntimeError: the real cause"
    assert context == ["Traceback (most recent call last):", '  File "a.py", line 3, in <module>', "    g()",
                       "RuntimeError: the real cause"]
    assert last_error("usage: x.py [-h]\nx.py: error: unrecognized arguments: --bad\n")[0] == \
        "x.py: error: unrecognized arguments: --bad"
    assert last_error("") == ("", [])


BAD_OPTION = """\
import torch
import bagua_core as bagua

bagua.init_process_group()
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model = model.with_bagua([optimizer], "bytegradd" if bagua.get_rank() == 1 else "bytegrad")
"""


def _check_one_screen(output: str, shown_by: int, cause: str, kind: str, others: list[str]) -> None:
    """At most 10 lines: one traceback (rank ``shown_by``'s, its cause ``cause`` once), a line for each other
    rank (``others``), every rank's line with its prefix, and the launcher's summary naming the rank and type."""
    lines = output.strip().splitlines()
    assert len(lines) <= 10, output
    assert output.count(cause) == 1, output
    assert output.count("Traceback (most recent call last)") == 1, output
    assert [line for line in lines if not line.startswith("[rank")] == lines[-1:], output  # prefixed but the last
    # the traceback is the shown rank's first line (the launcher's pumps may put another rank's line first)
    assert [line for line in lines if line.startswith(f"[rank{shown_by}]: ")][0] == \
        f"[rank{shown_by}]: Traceback (most recent call last):", output
    assert sorted(line.split("]: ", 1)[1] for line in lines if line.startswith("[rank") and "]: bagua: " in line) == \
        sorted(others), output
    assert not [line for line in lines if line.startswith(("E1", "W1", "I1"))]  # torch's launcher logs
    assert lines[-1].startswith(f"bagua: workers failed; first failure: rank {shown_by} (") and \
        lines[-1].endswith(f"): {kind} (its traceback is above; bagua run --verbose shows every rank's)"), lines[-1]


def test_a_failed_job_fits_one_screen_and_starts_with_the_cause(tmp_path) -> None:
    """A bad option on one rank of three: its traceback, one line for each other rank, the summary."""
    script = tmp_path / "bad.py"
    script.write_text(BAD_OPTION)
    result = _run(["run", "--standalone", "--nproc_per_node=3", str(script)], cwd=tmp_path)
    assert result.returncode == 1
    _check_one_screen(result.stderr + result.stdout, 1, "unknown algorithm 'bytegradd'", "UnknownNameError",
                      ["bagua: stopped: rank 1 failed first (UnknownNameError)"] * 2)


OPTION_BY_RANK = """\
import torch
import bagua_core as bagua
from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithm

bagua.init_process_group()
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model = model.with_bagua([optimizer], GradientAllReduceAlgorithm(hierarchical=bagua.get_rank() == 1))
"""

UNKNOWN_OPTION = """\
import torch
import bagua_core as bagua

bagua.init_process_group()
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
algorithm = {"name": "bytegrad", "hierarchical": False}
if RANKS:
    algorithm["compresion"] = "MinMaxUInt8"
model = model.with_bagua([optimizer], algorithm)
"""

EXCEPTION_WHILE_TRAINING = """\
import torch
import bagua_core as bagua

bagua.init_process_group()
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model = model.with_bagua([optimizer], "gradient_allreduce")
for step in range(3):
    if bagua.get_rank() == 1 and step == 1:
        raise ValueError("bad batch")
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
"""


@pytest.mark.parametrize("source, shown_by, cause, kind, other", [
    (OPTION_BY_RANK, 0, "algorithm option 'hierarchical' differs: rank 0 False, rank 1 True", "RankMismatchError",
     "bagua: failed the same way as rank 0 (RankMismatchError)"),
    (UNKNOWN_OPTION.replace("RANKS", "bagua.get_rank() == 1"), 1, "bytegrad.compresion: Extra inputs",
     "BaguaConfigError", "bagua: stopped: rank 1 failed first (BaguaConfigError)"),
    (UNKNOWN_OPTION.replace("RANKS", "True"), 0, "bytegrad.compresion: Extra inputs", "BaguaConfigError",
     "bagua: failed the same way as rank 0 (BaguaConfigError)"),
    (EXCEPTION_WHILE_TRAINING, 1, "ValueError: bad batch", "ValueError", "bagua: stopped: rank 1 failed first (ValueError)"),
], ids=["option-differs-by-rank", "bad-option-on-one-rank", "bad-option-on-both", "exception-while-training"])
def test_a_failed_two_rank_job_is_one_traceback_and_a_line(tmp_path, source: str, shown_by: int, cause: str,
                                                           kind: str, other: str) -> None:
    script = tmp_path / "failing.py"
    script.write_text(source)
    result = _run(["run", "--standalone", "--nproc_per_node=2", str(script)], cwd=tmp_path)
    assert result.returncode == 1
    _check_one_screen(result.stderr + result.stdout, shown_by, cause, kind, [other])


TYPO_ON_EVERY_RANK = """\
import torch
import bagua_core as bagua

bagua.init_process_group()
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model = model.with_bagua([optimizer], "bytegrd")
"""


def test_the_same_error_on_two_ranks_is_one_failure_in_a_few_lines(tmp_path) -> None:
    """Every rank raises the same error before any collective: one failure, so one traceback (without the
    frames of bagua's checks), one line for the other rank, the launcher's line."""
    script = tmp_path / "typo.py"
    script.write_text(TYPO_ON_EVERY_RANK)
    result = _run(["run", "--standalone", "--nproc_per_node=2", str(script)], cwd=tmp_path)
    assert result.returncode == 1
    output = result.stderr + result.stdout
    _check_one_screen(output, 0, "unknown algorithm 'bytegrd' (did you mean 'bytegrad'?)", "UnknownNameError",
                      ["bagua: failed the same way as rank 0 (UnknownNameError)"])
    assert f'File "{script}", line 7, in <module>' in output and "agreement.py" not in output


def test_every_rank_traceback_with_verbose(tmp_path) -> None:
    script = tmp_path / "bad.py"
    script.write_text(BAD_OPTION)
    result = _run(["run", "--verbose", "--standalone", "--nproc_per_node=2", str(script)], cwd=tmp_path)
    assert result.returncode == 1
    assert (result.stderr + result.stdout).count("Traceback (most recent call last)") == 2


def test_a_script_started_without_a_launcher_is_told_how(tmp_path) -> None:
    script = tmp_path / "plain.py"
    script.write_text("import bagua_core as bagua\nbagua.init_process_group()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1
    assert "not started by a launcher" in result.stderr and "bagua run --nproc_per_node" in result.stderr
