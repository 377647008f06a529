"""Figures of fault-tolerant mode on this machine (not a test): two one-rank replicas on a lighthouse,
replica b killed mid-step at its step 20 and restarted; prints the time from the restarted process's start
to its first committed step, the steps the survivor committed while b was down, and the discarded steps.

    python -m tests.fault_tolerant_measure [--algorithm '{"name": "bytegrad"}']
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from tests.fault_tolerant_job import Job


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithm", default='{"name": "gradient_allreduce"}')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(Path(tmp), preloaded=False)  # the restart's time counts its imports
        try:
            job.start("a", "--algorithm", args.algorithm, step_delay_s=0.0)
            job.start("b", "--algorithm", args.algorithm, "--die-at", "20", step_delay_s=0.0)
            job.wait_exit("b", 300)
            killed_pid = job.records("b")[-1]["pid"]
            died_at = job.records("b")[-1]["t"]
            job.start("b", "--algorithm", args.algorithm, step_delay_s=0.0)
            job.wait_for("committed 5 steps after its restart",
                         lambda: len([r for r in job.committed("b", quorum=2) if r["pid"] != killed_pid]) >= 5, 300, "b")
            job.stop()
            job.wait_exit("a", 60)
            job.wait_exit("b", 60)
            again = [r for r in job.committed("b") if r["pid"] != killed_pid]
            first = again[0]
            alone = [r for r in job.committed("a", quorum=1) if died_at < r["t"] < first["t"]]
            a = job.records("a")
            print(json.dumps({
                "algorithm": json.loads(args.algorithm)["name"],
                "restart_to_first_commit_s": round(first["t"] - first["started"], 2),
                "killed_to_restart_first_commit_s": round(first["t"] - died_at, 2),
                "survivor_commits_while_down": len(alone),
                "survivor_steps_discarded": sum(1 for r in a if not r["committed"]),
                "survivor_step_s_alone": round((alone[-1]["t"] - alone[0]["t"]) / max(len(alone) - 1, 1), 5)
                if len(alone) > 1 else None,
                "healed": first["healed"], "joined_at_step": first["step"],
            }))
        finally:
            job.close()


if __name__ == "__main__":
    main()
