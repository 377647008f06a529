"""Install the torch build this machine needs (setup.sh runs this where torch is missing).

A plain ``pip install torch==2.13.0`` from PyPI gives the CUDA build with its multi-GB nvidia-* packages,
useful only with a GPU. So:

- ``BAGUA_TORCH_INDEX`` set: install from that index (``default``: the default index, whatever it gives);
- a GPU (``nvidia-smi -L`` lists one): the default index (the CUDA build);
- no GPU: ask pip what the default index resolves ``torch==2.13.0`` to (``--dry-run --report``). If that is
  already the CPU build (no nvidia-*/triton package, no ``+cu`` version: a mirror or a machine whose pip
  offers it), install it; else install from PyTorch's CPU index, https://download.pytorch.org/whl/cpu,
  with a short timeout and, if that fails, a message saying what to set.

One line says which build was chosen and why. ``--dry-run`` decides and prints the pip command without
installing anything (tests/test_setup_torch.py tests :func:`decide` with fake pip reports).

    python3 tools/choose_torch.py [--dry-run] [--python PYTHON]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from typing import Any

__all__ = ["TORCH", "CPU_INDEX", "Choice", "decide", "cuda_packages", "has_gpu", "resolve_default", "main"]

TORCH = "torch==2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_INDEX_TIMEOUT_S = 20


@dataclasses.dataclass(frozen=True)
class Choice:
    build: str  # "cpu", "cuda" or "forced" (what BAGUA_TORCH_INDEX's index gives)
    index: str | None  # None: pip's default index (its configuration)
    reason: str

    def pip_args(self) -> list[str]:
        args = ["install", TORCH]
        if self.index is not None:
            args += ["--index-url", self.index, "--timeout", str(CPU_INDEX_TIMEOUT_S), "--retries", "1"]
        return args

    def line(self) -> str:
        where = self.index or "the default index"
        build = "the build" if self.build == "forced" else f"the {self.build.upper()} build"
        return f"setup.sh: torch: {build} from {where} ({self.reason})"


def cuda_packages(report: dict[str, Any]) -> list[str]:
    """What in a ``pip install --dry-run --report`` marks the CUDA build: nvidia-* and triton packages, a
    torch version with a ``+cu`` local part."""
    found = []
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        name, version = str(meta.get("name", "")).lower(), str(meta.get("version", ""))
        if name.startswith("nvidia-") or name in ("triton", "pytorch-triton") or (name == "torch" and "+cu" in version):
            found.append(f"{name} {version}".strip())
    return found


def decide(gpu: bool, report: dict[str, Any] | None, forced_index: str | None = None,
           resolve_error: str = "") -> Choice:
    """The build to install, from the facts: a GPU, what the default index resolves torch to (``None``:
    pip could not resolve it, ``resolve_error`` says why), ``BAGUA_TORCH_INDEX``."""
    if forced_index:
        index = None if forced_index == "default" else forced_index
        return Choice("forced", index, "BAGUA_TORCH_INDEX is set")
    if gpu:
        return Choice("cuda", None, "nvidia-smi lists a GPU")
    if report is None:
        return Choice("cpu", CPU_INDEX, f"no GPU, and the default index does not resolve {TORCH}: {resolve_error}")
    cuda = cuda_packages(report)
    if cuda:
        shown = ", ".join(cuda[:3]) + (f" and {len(cuda) - 3} more" if len(cuda) > 3 else "")
        return Choice("cpu", CPU_INDEX, f"no GPU, and the default index gives the CUDA build: {shown}")
    torch_version = next((i["metadata"]["version"] for i in report.get("install", [])
                          if str(i.get("metadata", {}).get("name", "")).lower() == "torch"), "?")
    return Choice("cpu", None, f"no GPU, and the default index already gives the CPU build, torch {torch_version}")


def has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and "GPU" in result.stdout


def resolve_default(python: str) -> tuple[dict[str, Any] | None, str]:
    """What ``pip install torch==...`` would install from the default index: (pip's report, error)."""
    command = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--report", "-", TORCH]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "pip's dry run took more than 600 s"
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        return None, lines[-1] if lines else f"pip exited with {result.returncode}"
    try:
        return json.loads(result.stdout), ""
    except json.JSONDecodeError:
        return None, "pip's report is not JSON (pip older than 22.2? upgrade pip)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the choice and the pip command only")
    parser.add_argument("--python", default=sys.executable, help="the Python to install torch into")
    args = parser.parse_args(argv)
    forced = os.environ.get("BAGUA_TORCH_INDEX", "").strip() or None
    gpu = False if forced else has_gpu()
    report, error = (None, "") if forced or gpu else resolve_default(args.python)
    choice = decide(gpu, report, forced, error)
    print(choice.line(), flush=True)
    command = [args.python, "-m", "pip", *choice.pip_args()]
    if args.dry_run:
        print("setup.sh: would run: " + " ".join(command))
        return 0
    if subprocess.run(command).returncode == 0:
        return 0
    print(f"setup.sh: could not install {TORCH} from {choice.index or 'the default index'}. Set BAGUA_TORCH_INDEX "
          "to an index that holds it (a mirror of the CPU wheels; 'default': pip's configured index, whatever "
          "build it gives) and run setup.sh again.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
