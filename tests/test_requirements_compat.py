"""A requirements file written for the original Bagua (its examples ship ``bagua>=0.6``) is satisfied by
this project, so ``pip install -r requirements.txt`` installs nothing over it (docs/migrating.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import bagua
import bagua_core

# the lines of the original's examples/*/requirements.txt (>=0.6, >=0.7, >=0.8) and other common forms
# (its last release was 0.9.2)
ORIGINAL_REQUIREMENTS = ["bagua>=0.6", "bagua>=0.7", "bagua>=0.8", "bagua>=0.8.1", "bagua>=0.9", "bagua>=0.9.0",
                         "bagua~=0.9", "bagua~=0.8", "bagua", "bagua>=0.6,<1"]


def test_version_is_reported_consistently() -> None:
    installed = metadata.version("bagua")
    assert bagua.__version__ == bagua_core.__version__ == installed
    assert Version(installed) > Version("0.9.2")  # above every release of the original


@pytest.mark.parametrize("line", ORIGINAL_REQUIREMENTS)
def test_installed_version_satisfies_the_originals_requirements(line: str) -> None:
    requirement = Requirement(line)
    assert requirement.specifier.contains(metadata.version("bagua"), prereleases=True), line


def test_pip_resolver_installs_nothing_for_the_originals_requirements(tmp_path) -> None:
    """pip's own resolver, offline (no index, no find-links): an unsatisfied line would be an error."""
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("\n".join(ORIGINAL_REQUIREMENTS[:5]) + "\n")
    env = {**os.environ, "PIP_FIND_LINKS": "", "PIP_NO_INDEX": "1"}
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--quiet",
                             "--report", "-", "-r", str(requirements)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["install"] == []
    # and the same resolver refuses what this project cannot satisfy (so the check above can fail)
    pinned = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--quiet",
                             "bagua==0.9.2"], capture_output=True, text=True, env=env, timeout=120)
    assert pinned.returncode != 0 and "bagua==0.9.2" in pinned.stderr
