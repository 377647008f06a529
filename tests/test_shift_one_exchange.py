"""shift_one posts its receive before its send, so both directions of the link carry the weights at once.

Gloo writes a receive's announcement to the partner on the same socket as this rank's outgoing
data: posted after the send, it waited behind the whole message and the exchange took twice the
time its bytes need on the link (measured: 3.5 s against 1.9 s for 21 MB at 100 Mbit/s, 2 hosts).
The timing needs emulated hosts; the order is checked here.
"""

from __future__ import annotations

import torch

import bagua_algorithms.decentralized.op as decentralized


class _Comm:
    torch_group = "group"

    def __init__(self, rank: int, nranks: int) -> None:
        self._rank, self._nranks = rank, nranks

    def nranks(self) -> int:
        return self._nranks

    def rank(self) -> int:
        return self._rank

    def group_rank(self, rank: int) -> int:  # the peer's rank in torch_group: what torch is handed
        return 10 + rank


class _Work:
    def wait(self) -> bool:
        return True


def test_the_receive_is_posted_before_the_send(monkeypatch) -> None:
    posted: list[tuple[str, int]] = []
    monkeypatch.setattr(decentralized, "irecv", lambda t, src=None, group=None, tag=0, *, group_src=None:
                        posted.append(("recv", group_src)) or _Work())
    monkeypatch.setattr(decentralized, "isend", lambda t, dst=None, group=None, tag=0, *, group_dst=None:
                        posted.append(("send", group_dst)) or _Work())
    mine, received = torch.full((4,), 1.0), torch.full((4,), 3.0)
    finish = decentralized._start_average_with_peers(mine, _Comm(rank=1, nranks=4), "shift_one", 0, received)
    partner = 10 + decentralized.shift_one_peer(1, 4, 0)
    assert posted == [("recv", partner), ("send", partner)]
    finish()
    assert torch.equal(mine, torch.full((4,), 2.0))
