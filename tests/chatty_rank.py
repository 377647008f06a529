"""A job for ``tests/test_benchmarks_smoke.py``: rank 1 prints more than a pipe holds and then says it is done;
rank 0 waits for that, as it would in a collective, and fails after 30 s if it never comes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

done = Path(sys.argv[1])
if os.environ["RANK"] == "1":
    sys.stdout.write("x" * (1 << 20) + "\n")
    sys.stdout.flush()
    done.write_text("done")
else:
    deadline = time.monotonic() + 30
    while not done.exists():
        if time.monotonic() > deadline:
            sys.exit("rank 1 never finished printing (blocked writing its output?)")
        time.sleep(0.05)
