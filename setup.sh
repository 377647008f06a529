#!/usr/bin/env bash
# Set up bagua from a clone: torch first, the CPU build where there is no GPU (a plain install from PyPI
# would pull the multi-GB CUDA build; tools/choose_torch.py decides and says why, BAGUA_TORCH_INDEX forces
# an index), redis-server for the cache tests, then bagua with its test, lightning and ft (torchft, for
# fault-tolerant mode) extras (this compiles native/), then the example third-party plugin packages (the
# algorithm local_sgd and the feature gradient_clipping; real, non-editable installs).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

# bagua needs torch 2.9 or later (pyproject.toml): an older one is replaced the same way as a missing one
if ! "$PY" -c "import torch, sys; sys.exit(tuple(map(int, torch.__version__.split('+')[0].split('.')[:2])) < (2, 9))" 2>/dev/null; then
  "$PY" tools/choose_torch.py --python "$PY"
else
  echo "setup.sh: torch: $("$PY" -c "import torch; print(torch.__version__)") is installed; left as it is"
fi
if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  else
    echo "setup.sh: redis-server not found; install it (e.g. apt-get install redis-server) for the cache tests" >&2
  fi
fi
"$PY" -m pip install -e ".[test,lightning,ft]"
if [ -f plugins_example/pyproject.toml ]; then
  "$PY" -m pip install ./plugins_example
fi
if [ -f plugins_example/gradient_clipping/pyproject.toml ]; then
  "$PY" -m pip install ./plugins_example/gradient_clipping
fi
