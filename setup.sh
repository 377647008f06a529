#!/usr/bin/env bash
# Set up bagua from a clone: the CPU build of torch first (a plain install would pull the multi-GB CUDA
# build), redis-server for the cache tests, then bagua with its test, lightning and ft (torchft, for
# fault-tolerant mode) extras (this compiles native/), then the example third-party plugin package (a real,
# non-editable install).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install torch==2.13.0
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
