"""What a rank writes to its sockets per step does not grow with the number of ranks where the message
pattern says it should not (issue 24): shift_one sends one model to one partner whatever n, the
low-precision ring a compressed model to each of its two neighbours from n = 3 on; counted per process
(``/proc/self/io``) on loopback, so other work on the machine does not enter the counts."""

from __future__ import annotations

import pytest

from benchmarks import message_count
from tests.documented import command


def test_bytes_per_rank_follow_the_message_pattern() -> None:
    # benchmarks/README.md's command
    summaries = message_count.main([*command("benchmarks/README.md", "python -m benchmarks.message_count"),
                                    "--timeout", "120"])
    got = {(s["method"], s["world_size"]): s for s in summaries}
    assert set(got) == {(m, n) for m in ("decentralized_shift_one", "low_precision_decentralized") for n in (2, 4)}
    model_bytes = 4 * (256 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10)
    for n in (2, 4):
        shift_one = got[("decentralized_shift_one", n)]
        # one message of the whole model to one partner, nothing else (no per-step agreement, no barrier)
        assert shift_one["collectives"] == {"send": (1, model_bytes)}
        assert shift_one["written"] == pytest.approx(model_bytes, rel=0.01)
    lpd2, lpd4 = got[("low_precision_decentralized", 2)], got[("low_precision_decentralized", 4)]
    # one neighbour at n = 2, two from n = 3 on (the model is one bucket); beside them only the
    # one-element overflow agreement
    assert lpd2["collectives"]["send"][0] == 1 and lpd4["collectives"]["send"][0] == 2
    # (within 10%: the overlapped ring's segments are written while the next step runs, so the counted
    # window's edges can hold part of a round more or less: over 4 steps CI runs measured 1.90x and 2.29x,
    # hence 12 steps)
    assert lpd4["written"] == pytest.approx(2 * lpd2["written"], rel=0.1)
    assert set(lpd4["collectives"]) == {"send", "allreduce"} and lpd4["collectives"]["allreduce"] == (1, 4)
