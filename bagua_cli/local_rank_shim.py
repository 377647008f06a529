"""Run a training script with ``--local_rank=$LOCAL_RANK`` before its own arguments, where the original's
``bagua.distributed.launch --set_additional_flag`` put it (``script.py --local_rank=N args``).

    python -m bagua_cli.local_rank_shim --script train.py [args]
    python -m bagua_cli.local_rank_shim --module package.train [args]
"""

from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
    kind, target, *args = sys.argv[1:]
    sys.argv = [target, f"--local_rank={os.environ.get('LOCAL_RANK', '0')}", *args]
    if kind == "--module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(target))  # as `python script.py`: its folder, not ours
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
