"""The plugin guide's package installs as docs/plugins.md says: its files are written from the guide's own
code blocks (those named ``bagua-my-algorithm/...``), the guide's install command (``pip install
./bagua-my-algorithm``) builds and installs it, here into a temporary directory rather than the test's
environment, and bagua then finds it by its entry point alone: ``bagua plugins`` lists it and
``with_bagua`` selects it by name, with no inline registration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.test_docs_examples import REPO, blocks_of

GUIDE = "docs/plugins.md"
PACKAGE = "bagua-my-algorithm"

USE_IT = """\
import os

import torch

import bagua_core as bagua
import bagua_my_algorithm

bagua.init_process_group()
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model = model.with_bagua([optimizer], {"name": "my_algorithm", "rounds": 3})
for _ in range(2):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
print(type(model.bagua_algorithm).__name__, model.bagua_algorithm.config.rounds, bagua_my_algorithm.__file__)
"""


def _write_the_guides_package(root: Path) -> list[str]:
    blocks = [b for b in blocks_of((REPO / GUIDE).read_text(encoding="utf-8"), GUIDE)
              if b.name and b.name.startswith(PACKAGE + "/")]
    for block in blocks:
        target = root / block.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.code)
    return [b.name for b in blocks]


def _the_guides_install_command() -> list[str]:
    commands = [line.split() for b in blocks_of((REPO / GUIDE).read_text(encoding="utf-8"), GUIDE)
                if b.lang == "bash" for line in b.code.splitlines() if line.startswith("pip install")]
    assert commands == [["pip", "install", f"./{PACKAGE}"]], commands
    return commands[0]


def test_the_guides_package_builds_installs_and_is_found_by_its_entry_point(tmp_path: Path) -> None:
    written = _write_the_guides_package(tmp_path)
    assert f"{PACKAGE}/pyproject.toml" in written and f"{PACKAGE}/bagua_my_algorithm/__init__.py" in written, written
    site = tmp_path / "site"
    # the guide's command, into a directory of its own, offline (bagua and setuptools come from this environment)
    pip = [sys.executable, "-m", *_the_guides_install_command(), "--no-deps", "--no-build-isolation",
           "--no-index", "--target", str(site)]
    built = subprocess.run(pip, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert list(site.glob("bagua_my_algorithm-0.1.0.dist-info/entry_points.txt")), sorted(p.name for p in site.iterdir())

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1"}
    listed = subprocess.run([sys.executable, "-m", "bagua_cli", "plugins"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0 and "my_algorithm" in listed.stdout, listed.stdout[-3000:] + listed.stderr[-3000:]

    (tmp_path / "use_it.py").write_text(USE_IT)  # one rank: the name alone selects the installed plugin
    one_rank = {**env, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    used = subprocess.run([sys.executable, "use_it.py"], cwd=tmp_path, env=one_rank, capture_output=True, text=True,
                          timeout=300)
    assert used.returncode == 0, used.stdout[-3000:] + used.stderr[-3000:]
    name, rounds, module_file = used.stdout.split()
    assert (name, rounds) == ("MyImpl", "3")
    assert Path(module_file).is_relative_to(site), module_file  # the installed copy, not the written sources


def _free_port() -> int:
    from tests.distributed import free_port

    return free_port()
