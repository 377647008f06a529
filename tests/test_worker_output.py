"""The workers' output through ``bagua run``: every line of a rank reaches the launcher's output whole, never
cut by another rank's, even when a rank writes a line in pieces (``print`` with unbuffered output writes the
text and its newline separately); a replica's lines say which replica they come from
(bagua_cli/worker_logs.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from bagua_cli.worker_logs import _Pump, _whole_line_pieces

PIECES = """\
import os, sys, time
rank = os.environ["RANK"]
for i in range(300):
    time.sleep(0.01 - time.time() % 0.01)  # both ranks write at the same moment (a shared clock's 10 ms tick)
    for stream, word in ((sys.stdout, "line"), (sys.stderr, "err")):
        stream.write(f"rank {rank} {word} {i}")  # the text, then its end: two writes, with time between
        stream.flush()
        time.sleep(0.002)
        stream.write("\\n")
        stream.flush()
"""


def test_lines_of_two_ranks_are_never_mixed(tmp_path) -> None:
    script = tmp_path / "pieces.py"
    script.write_text(PIECES)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    result = subprocess.run([sys.executable, "-m", "bagua_cli", "run", "--standalone", "--nproc_per_node=2",
                             str(script)], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for stream, word in ((result.stdout, "line"), (result.stderr, "err")):
        lines = stream.splitlines()
        mixed = [line for line in lines if not re.fullmatch(rf"rank [01] {word} \d+", line)]
        assert not mixed, mixed[:5]
        assert sorted(lines) == sorted(f"rank {r} {word} {i}" for r in (0, 1) for i in range(300))


def test_a_replicas_lines_start_with_its_replica() -> None:
    pump = _Pump("unused", 0, "stdout", b"[replica 1] ")
    assert pump._prefixed(b"rank 0 of 1: loss 2.3\nsecond ") == b"[replica 1] rank 0 of 1: loss 2.3\n[replica 1] second "
    assert pump._prefixed(b"line\n") == b"line\n"  # the rest of a line already begun
    # a progress bar redraws its line after a carriage return: the replica is named on each drawing
    assert pump._prefixed(b"\r 10%|#\r 20%|##") == b"\r[replica 1]  10%|#\r[replica 1]  20%|##"
    assert pump._prefixed(b"\r\n") == b"\r\n"
    plain = _Pump("unused", 0, "stderr", b"")
    assert plain._prefixed(b"step 1\rstep 2\rdone\n") == b"step 1\rstep 2\rdone\n"


def test_a_standbys_lines_start_with_its_replica_once_it_is_activated(tmp_path, monkeypatch) -> None:
    from bagua_features.fault_tolerance import standby

    path = str(tmp_path / "standby_0.json")
    monkeypatch.setenv(standby.STANDBY_ENV, path)
    pump = _Pump("unused", 0, "stdout", None)  # (what TailingLogsSpecs gives a standby's pumps)
    assert pump._prefixed(b"loading data\n") == b"loading data\n"  # waiting: it stands for no replica yet
    standby.activate(path, "replica_2", 2)
    assert pump._prefixed(b"epoch 1\n") == b"[replica 2] epoch 1\n"


def test_long_output_is_written_in_pieces_that_end_at_a_line_end() -> None:
    data = b"".join(f"line {i:04d}\n".encode() for i in range(1000))  # 10 kB
    pieces = _whole_line_pieces(data)
    assert b"".join(pieces) == data and len(pieces) > 1
    assert all(piece.endswith(b"\n") and len(piece) <= 4096 for piece in pieces)
    assert _whole_line_pieces(b"x" * 5000 + b"\n") == [b"x" * 5000 + b"\n"]  # a longer line stays whole


def test_a_line_written_without_its_end_is_not_cut_by_another_ranks(monkeypatch) -> None:
    """A rank's line goes out without its end once it waited PARTIAL_LINE_S (on a loaded machine the end can
    come later: a CI run printed 'rank 0 line 258rank 1 line 184'); another rank's line then waits for it."""
    import io
    import threading
    import time

    captured = io.StringIO()
    monkeypatch.setattr(sys, "stdout", captured)
    first, second = _Pump("unused", 0, "stdout", b""), _Pump("unused", 1, "stdout", b"")
    first._emit(b"rank 0 line 258")
    other = threading.Thread(target=second._emit, args=(b"rank 1 line 184\n",))
    other.start()
    time.sleep(0.3)  # the end of rank 0's line comes late
    first._emit(b"\n")
    other.join()
    assert captured.getvalue() == "rank 0 line 258\nrank 1 line 184\n"
