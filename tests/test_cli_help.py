"""Every option a user can give is in the help that lists it: ``bagua run --help`` and ``bagua train --help``
show every fault-tolerant option and ``--verbose``; ``bagua --help`` is plain text."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bagua_core.cli import fault_tolerant

BAGUA = [sys.executable, "-m", "bagua_core.cli"]


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
