"""Every option a user can give is in the help that lists it: ``bagua run --help`` and ``bagua train --help``
show every fault-tolerant option and ``--verbose``; ``bagua --help`` is plain text."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bagua_cli import fault_tolerant

BAGUA = [sys.executable, "-m", "bagua_cli"]


def _help(*args: str) -> str:
    result = subprocess.run(BAGUA + list(args), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("command", [["run", "--help"], ["train", "--help"]])
def test_every_fault_tolerant_option_is_listed(command: list[str]) -> None:
    text = _help(*command)
    for flag in fault_tolerant._FLAGS + ("--verbose",):
        assert flag in text, f"{flag} missing from bagua {' '.join(command)}"
    assert "--nproc_per_node" in text if command[0] == "run" else "--option KEY=VALUE" in text


def test_the_flag_list_is_the_parser() -> None:
    """The flags ``bagua run`` takes out for itself are exactly those its fault-tolerant parser knows."""
    known = {option for action in fault_tolerant._parser()._actions for option in action.option_strings}
    assert set(fault_tolerant._FLAGS) == known


def test_bagua_help_is_plain_text() -> None:
    text = _help("--help")
    assert "``" not in text and "bagua run" in text and "bagua train" in text and "bagua plugins" in text


def test_train_help_is_plain_text_and_lists_max_restarts() -> None:
    text = _help("train", "--help")
    assert "``" not in text, [line for line in text.splitlines() if "``" in line]
    assert "--max-restarts M" in text


@pytest.mark.parametrize("args, status", [(["--help"], 0), ([], 0), (["trian"], 2)], ids=["help", "no-args", "unknown"])
def test_the_console_script_answers_without_importing_torch(args: list[str], status: int) -> None:
    """``bagua --help`` answers at once: ``import torch`` takes seconds, and the console script (``bagua_cli``)
    imports neither torch nor the ``bagua_core`` package (which imports torch) to print its usage."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "bagua_cli", *args], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == status, result.stderr
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "bagua_cli" in imported  # the check sees the imports
    assert not imported & {"torch", "bagua_core", "pydantic", "pluggy"}, sorted(imported)
    shown = result.stdout if status == 0 else result.stderr
    assert ("bagua train" in shown) if status == 0 else ("did you mean train?" in shown)


def test_the_console_script_is_the_front_door() -> None:
    """The installed ``bagua`` runs ``bagua_cli:program`` (``python -m bagua_cli`` too), which hands a command to
    ``bagua_cli.main``."""
    import pathlib
    import tomllib

    pyproject = tomllib.loads((pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["bagua"] == "bagua_cli:program"
    result = subprocess.run([sys.executable, "-m", "bagua_cli", "check-config", "no_such_config.toml"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "bagua check-config: error:" in result.stderr, result.stderr
