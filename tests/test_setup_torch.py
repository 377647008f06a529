"""setup.sh's choice of torch build (tools/choose_torch.py): the CPU build where there is no GPU, from the
default index when it already offers it, else from PyTorch's CPU index; the CUDA build with a GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("choose_torch", ROOT / "tools" / "choose_torch.py")
choose_torch = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("choose_torch", choose_torch)  # dataclasses look their module up there
_spec.loader.exec_module(choose_torch)


def _report(*packages: tuple[str, str]) -> dict:
    return {"version": "1", "install": [{"metadata": {"name": n, "version": v}} for n, v in packages]}


CUDA_REPORT = _report(("torch", "2.13.0"), ("nvidia-cublas-cu12", "12.8.4.1"), ("nvidia-cudnn-cu12", "9.10.2.21"),
                      ("triton", "3.5.0"), ("sympy", "1.14.0"))
CPU_REPORT = _report(("torch", "2.13.0+cpu"), ("sympy", "1.14.0"), ("filelock", "3.20.0"))


def test_no_gpu_and_the_default_index_gives_cuda_uses_the_cpu_index() -> None:
    choice = choose_torch.decide(gpu=False, report=CUDA_REPORT)
    assert choice.build == "cpu" and choice.index == "https://download.pytorch.org/whl/cpu"
    assert choice.pip_args()[:4] == ["install", "torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu"]
    assert "--timeout" in choice.pip_args()
    assert "nvidia-cublas-cu12 12.8.4.1" in choice.line() and "the CPU build from https://download.pytorch.org" in choice.line()
    # a +cu local version alone marks the CUDA build too
    assert choose_torch.decide(False, _report(("torch", "2.13.0+cu128"))).index == choose_torch.CPU_INDEX


def test_no_gpu_and_the_default_index_gives_cpu_uses_it() -> None:
    choice = choose_torch.decide(gpu=False, report=CPU_REPORT)
    assert (choice.build, choice.index, choice.pip_args()) == ("cpu", None, ["install", "torch==2.13.0"])
    assert "already gives the CPU build, torch 2.13.0+cpu" in choice.line()


def test_gpu_uses_the_default_index_and_an_unresolvable_default_the_cpu_index() -> None:
    assert choose_torch.decide(gpu=True, report=None).pip_args() == ["install", "torch==2.13.0"]
    assert "nvidia-smi lists a GPU" in choose_torch.decide(True, None).line()
    choice = choose_torch.decide(False, None, resolve_error="No matching distribution found for torch==2.13.0")
    assert choice.index == choose_torch.CPU_INDEX and "No matching distribution" in choice.line()


def test_bagua_torch_index_forces_the_index() -> None:
    choice = choose_torch.decide(gpu=True, report=CUDA_REPORT, forced_index="https://mirror.example/cpu")
    assert choice.index == "https://mirror.example/cpu" and "BAGUA_TORCH_INDEX" in choice.line()
    assert choose_torch.decide(False, CUDA_REPORT, forced_index="default").index is None


def test_dry_run_prints_the_choice_and_installs_nothing() -> None:
    env = dict(os.environ, BAGUA_TORCH_INDEX="https://mirror.example/cpu")  # forced: no network, no pip run
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "choose_torch.py"), "--dry-run"],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == ("setup.sh: torch: the build from https://mirror.example/cpu "
                     "(BAGUA_TORCH_INDEX is set)")
    assert second.startswith("setup.sh: would run: ") and "--index-url https://mirror.example/cpu" in second
