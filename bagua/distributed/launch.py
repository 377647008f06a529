"""``python -m bagua.distributed.launch [flags] script.py [args]``: the original's launcher, starting
workers through torchrun as ``bagua run`` does (flags mapped in ``bagua_cli.legacy_launch``)."""

from __future__ import annotations

import sys

from bagua_cli.legacy_launch import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main(prog="bagua.distributed.launch"))
