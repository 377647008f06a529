"""One replica of a fault-tolerant job, for tests/test_fault_tolerant*.py (run as a script).

Trains a tiny MLP on a seeded synthetic data set read through ``QuorumSampler`` and appends one JSON line
per step to ``--records``: the manager's committed step, whether it committed (or, inside a round of an algorithm
committing at its rounds' ends, stands), whether it closed its transaction, the quorum's size and this
replica's rank in it, a hash of the weights after the step, the pid (and with diloco's rounds bounded in time
the rounds merged, the last merge's weights and whether this replica's samples count in the round; with diloco's
rounds a hash of the outer weights, ``outer``; the data position, ``position``). ``--die-at`` / ``--hang-at`` make
it fail in the middle of that step (after forward, before backward: its peers are in the exchange);
``--die-in-exchange`` kills it from inside a collective between replicas (:class:`ExchangeKiller`);
``--fail-configure N`` makes this rank's N-th configuration of torchft's gloo group raise as a store that cannot be
reached does (:class:`ConfigureFailer`); ``--count-bytes`` adds ``bytes``: what the communication stats counted so far and what torch.distributed's
collectives were handed (:class:`HandedBytes`), per collective.
It stops after ``--steps`` committed steps or when the file ``--stop`` exists. Under ``bagua run
--fault-tolerant`` ``{replica}`` in ``--records`` is the replica's id and ``--only-replica`` picks the one to fail.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the heavy imports: a restart's time to its first commit counts them

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402

import torch  # noqa: E402

import bagua_core as bagua  # noqa: E402
from bagua_features.fault_tolerance import QuorumSampler, current_runtime  # noqa: E402
from bagua_core.lifecycle.tensor import local_shard  # noqa: E402
from bagua_core.runtime.communication import stats  # noqa: E402


def weights_hash(model: torch.nn.Module) -> str:
    """Of this rank's weights (a model sharded with FSDP2: its shards)."""
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(local_shard(tensor).detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def tensors_hash(tensors: list[torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


class ExchangeKiller:
    """``--die-in-exchange N``: SIGKILL from inside the managed group's collective (between replicas) of the first
    step >= N that issues any, at the call that was the last of the previous step with collectives (so the
    earlier collectives of a step that has several, e.g. bytegrad's alltoall before its allgather, were sent;
    the peers wait in the killed one). A collective of a background thread (async) counts for the step it
    runs in. It prints a line naming the collective before it dies."""

    def __init__(self, step: int) -> None:
        from bagua_features.fault_tolerance.managed_group import ManagedGroup

        self.at, self.step, self.calls, self.last_calls = step, 0, 0, 1
        if step <= 0:
            return
        original = ManagedGroup._forwarder

        def forwarder(group: ManagedGroup, method: str):
            run = original(group, method)

            def run_or_die(*args, **kwargs):
                self.calls += 1
                if self.step >= self.at and self.calls >= self.last_calls:
                    print(f"dying inside collective {method} on {group!r}: call {self.calls} of step {self.step}, "
                          f"thread {threading.current_thread().name}", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                return run(*args, **kwargs)

            return run_or_die

        ManagedGroup._forwarder = forwarder

    def begin(self, step: int) -> None:
        if self.calls:
            self.last_calls = self.calls
        self.step, self.calls = step, 0


class ConfigureFailer:
    """``--fail-configure N``: this rank's N-th call of torchft's ``ProcessGroupGloo.configure`` (the groups between
    replicas, configured on every new quorum) raises ``DistNetworkError`` before it connects, as a store that does
    not answer within its timeout does (seen in CI: "The client socket has timed out after 4000ms")."""

    def __init__(self, call: int) -> None:
        from torchft import ProcessGroupGloo

        if call <= 0:
            return
        original, calls = ProcessGroupGloo.configure, [0]

        def configure(group, store_addr, *args, **kwargs):
            calls[0] += 1
            if calls[0] == call:
                print(f"failing configure call {calls[0]} ({store_addr})", flush=True)
                raise torch.distributed.DistNetworkError("The client socket has timed out after 4000ms (injected)")
            return original(group, store_addr, *args, **kwargs)

        ProcessGroupGloo.configure = configure


class HandedBytes:
    """What this process hands to torch.distributed's collectives, on any thread (each function wrapped, as
    ``stats`` names them; the input's bytes, what ``bagua_core.runtime.communication.stats`` counts) until
    :meth:`restore`."""

    NAMES = {"all_reduce": "allreduce", "all_gather_into_tensor": "allgather", "all_gather_single": "allgather",
             "all_gather": "allgather", "broadcast": "broadcast", "reduce_scatter_tensor": "reduce_scatter",
             "all_to_all_single": "alltoall", "reduce": "reduce", "send": "send", "isend": "send"}
    INPUT_SECOND = {"all_gather_into_tensor", "all_gather_single", "all_gather", "reduce_scatter_tensor",
                    "all_to_all_single"}

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []
        """(collective, bytes, thread name) of every call, in order."""
        self._originals = {name: getattr(torch.distributed, name) for name in self.NAMES
                           if hasattr(torch.distributed, name)}
        for name, original in self._originals.items():
            setattr(torch.distributed, name, self._wrapper(name, original))

    def _wrapper(self, name: str, original):
        def wrapper(*args, **kwargs):
            handed = args[1] if name in self.INPUT_SECOND else args[0]
            self.calls.append((self.NAMES[name], handed.numel() * handed.element_size(),
                               threading.current_thread().name))
            return original(*args, **kwargs)

        return wrapper

    def by_collective(self) -> dict[str, dict[str, int]]:
        """``{collective: {"calls": n, "bytes": b}}``, as ``stats.snapshot()`` gives it."""
        out: dict[str, dict[str, int]] = {}
        for collective, nbytes, _ in list(self.calls):
            seen = out.setdefault(collective, {"calls": 0, "bytes": 0})
            seen["calls"] += 1
            seen["bytes"] += nbytes
        return dict(sorted(out.items()))

    def restore(self) -> None:
        for name, original in self._originals.items():
            setattr(torch.distributed, name, original)


def _stop_agreed(path: str) -> bool:
    """Whether ``path`` exists, agreed by the replica's ranks (a MAX over its fixed group): a rank that stopped
    alone would leave the replica's other ranks waiting for it in the next step's quorum."""
    seen = torch.tensor([1 if path and os.path.exists(path) else 0])
    if torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(seen, op=torch.distributed.ReduceOp.MAX)
    return bool(seen.item())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithm", default='{"name": "gradient_allreduce"}')
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--device", default="cpu", help="cuda: the model and the batches on the GPU")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--stop", default="")
    parser.add_argument("--records", required=True)
    parser.add_argument("--die-at", type=int, default=-1, help="SIGKILL itself in the middle of this step")
    parser.add_argument("--hang-at", type=int, default=-1, help="hang (sleep) in the middle of this step")
    parser.add_argument("--die-in-exchange", type=int, default=-1,
                        help="SIGKILL itself inside a collective between replicas at this step (ExchangeKiller)")
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--sharded", action="store_true",
                        help="shard the model with FSDP2 over the replica's ranks (bagua.node_mesh())")
    parser.add_argument("--late-at", type=int, default=-1,
                        help="at this step, sleep --late-s seconds between backward and optimizer.step()")
    parser.add_argument("--late-s", type=float, default=0.0)
    parser.add_argument("--only-replica", default="", help="--die-at/--hang-at apply only to this BAGUA_FT_REPLICA_ID, "
                        "and only to its first attempt under torchrun")
    parser.add_argument("--only-rank", type=int, default=-1, help="--die-at/--hang-at/--late-at/--fail-configure apply only to this RANK")
    parser.add_argument("--fail-configure", type=int, default=-1,
                        help="this rank's N-th configuration of a group between replicas fails (ConfigureFailer)")
    parser.add_argument("--count-bytes", action="store_true",
                        help="record the bytes counted and those handed to the collectives (HandedBytes)")
    args = parser.parse_args()
    handed = HandedBytes() if args.count_bytes else None
    replica = os.environ.get("BAGUA_FT_REPLICA_ID", "")
    args.records = args.records.replace("{replica}", replica)
    if args.only_replica and (replica != args.only_replica or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0"):
        args.die_at = args.hang_at = args.die_in_exchange = args.late_at = args.fail_configure = -1
    if args.only_rank >= 0 and int(os.environ.get("RANK", "0")) != args.only_rank:
        args.die_at = args.hang_at = args.die_in_exchange = args.late_at = args.fail_configure = -1
    killer = ExchangeKiller(args.die_in_exchange)
    ConfigureFailer(args.fail_configure)

    bagua.init_process_group()
    runtime = current_runtime()
    assert runtime is not None, "started without BAGUA_FAULT_TOLERANT=1"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 2))
    model = model.to(args.device)
    if args.sharded:
        from torch.distributed.fsdp import fully_shard

        mesh = bagua.node_mesh(args.device)
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    algorithm = json.loads(args.algorithm)
    from bagua_core.plugins import algorithm_registry

    declared = algorithm_registry.get(algorithm["name"])
    if declared.capabilities.builds_optimizer:
        optimizer = declared.build_optimizer(model.parameters(), lr=0.01, steps_per_epoch=2)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model = model.with_bagua([optimizer], algorithm)

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(4096, 8, generator=generator)
    y = (x[:, 0] > 0).long()
    x, y = x.to(args.device), y.to(args.device)
    sampler = QuorumSampler(len(x), batch_size=8, seed=0)
    step_in_process = 0
    with open(args.records, "a") as log:
        while runtime.manager.current_step() < args.steps and not _stop_agreed(args.stop):
            indices = sampler.next_indices(model)
            if indices is None:
                continue
            step_in_process += 1
            killer.begin(step_in_process)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[indices]), y[indices])
            if step_in_process == args.die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if step_in_process == args.hang_at:
                time.sleep(3600)
            loss.backward()
            if step_in_process == args.late_at:
                time.sleep(args.late_s)
            optimizer.step()
            group = runtime.group
            auto = getattr(model, "bagua_auto_result", None) or {}  # algorithm="auto": its choice, once made
            timed = getattr(model.bagua_algorithm, "timed", None)  # diloco's rounds bounded in time
            starts = getattr(model.bagua_algorithm, "starts", None)  # diloco's outer weights (equal on every replica)
            log.write(json.dumps({
                "step": runtime.manager.current_step(), "committed": bool(runtime.decision),
                "quorum": group.num_nodes, "rank": group.replica_rank, "local_rank": bagua.get_rank(), "hash": weights_hash(model),
                "loss": float(loss.detach()), "pid": os.getpid(), "t": time.time(), "healed": runtime.stats["healed"],
                "counter": model.bagua_train_step_counter, "started": STARTED,
                "auto": auto.get("algorithm"), "auto_at": auto.get("decided_at_step"),
                "held": sum(local_shard(p).numel() for p in model.parameters()),
                "parameters": sum(p.numel() for p in model.parameters()),
                "rounds": None if timed is None else timed.rounds,
                "round_weights": getattr(model.bagua_algorithm, "last_weights", None),
                "round_counting": None if timed is None else timed.counting,
                "round_steps": None if timed is None else timed.steps,
                "closed": runtime.closed_transaction,
                "position": [runtime.data_epoch, runtime.data_position],
                "outer": tensors_hash(starts) if starts else None,
                "bytes": None if handed is None else {"counted": stats.snapshot(), "handed": handed.by_collective()},
            }) + "\n")
            log.flush()
            if args.step_delay:
                time.sleep(args.step_delay)
    bagua.destroy_process_group()


if __name__ == "__main__":
    main()
