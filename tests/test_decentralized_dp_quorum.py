"""decentralized_dp as fault-tolerant mode runs it on a quorum, here on the default group's communicator
(no torchft needed): the edges of a topology derived for an odd size sum point to point (an edge of every
rank: an allreduce), and every round is mixed in when the step ends."""

from __future__ import annotations

import torch

from bagua_algorithms.decentralized_dp import DecentralizedEngine, get_topology
from bagua_algorithms.decentralized_dp.buckets import ParamBucket
from tests.distributed import run_workers


def _mix_on_a_quorum(rank: int) -> None:
    from bagua_core.runtime.process_group import get_default_group

    comm = get_default_group().get_global_communicator()
    # ring at 3 ranks: (0, 1) with 2 alone, then 0 alone with (1, 2); complete: everyone
    for name, expected in (("ring", [[1.5, 1.5, 3.0], [1.5, 2.25, 2.25]]), ("complete", [[2.0] * 3, [2.0] * 3])):
        param = torch.nn.Parameter(torch.full((5,), float(rank + 1)))
        topology = get_topology(name, 3, 3, any_size=True)
        engine = DecentralizedEngine([("p", param)], lambda named: torch.optim.SGD([p for _, p in named], lr=0.0),
                                     topology, quorum=comm)
        engine.use_buckets([ParamBucket([("p", param)], as_view=True)])
        for step, values in enumerate(expected):
            param.grad = torch.zeros_like(param)
            engine.step_bucket(engine.buckets[0])
            engine.end_step()  # on a quorum the round is mixed in here, not at the next step
            assert not engine.buckets[0].pending
            torch.testing.assert_close(param.detach(), torch.full((5,), values[rank]), rtol=0, atol=1e-6,
                                       msg=f"{name} step {step} rank {rank}")


def test_edges_sum_on_the_quorum_and_mix_within_the_step() -> None:
    run_workers(_mix_on_a_quorum, 3, timeout=120)
