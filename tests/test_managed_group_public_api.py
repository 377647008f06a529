"""Fault-tolerant mode's ``ManagedGroup`` is used through torch's public API only: torch's group tables never
hold it (no private ``distributed_c10d._world``), and every collective of the core runs on it all the same,
its peers named by their rank in the group (``group_dst=`` / ``group_src=``), its rank, size and backend asked
of the group itself (``bagua_core.runtime.torch_groups``).

Three processes; the managed group's ranks are a rotation of the global ones (member ``j`` is global rank
``j + 1 mod 3``), so a global rank handed to torch anywhere would reach the wrong peer, or raise. A torch group
whose ranks are not in global order (``new_group(sort_ranks=False)``) is wrapped with ``from_torch_group`` and
runs the rooted collectives on the right ranks too (``BaguaCommunicator.group_rank``)."""

from __future__ import annotations

import ast
import pathlib
import re
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from tests.distributed import free_port, run_workers
from tests.test_private_fields import KNOWN_PRIVATE_TORCH, private_torch_uses

ROOT = pathlib.Path(__file__).resolve().parent.parent
FT_PACKAGE = ROOT / "bagua_core" / "fault_tolerance"


def _collectives_on_a_managed_group(rank: int, port: int) -> dict:
    from torchft import ProcessGroupGloo

    from bagua_features.fault_tolerance.managed_group import ManagedGroup
    from bagua_core.runtime import agreement
    from bagua_core.runtime.communication import (
        BaguaCommunicator, ReduceOp, allgather, allreduce_inplace, alltoall, barrier, broadcast, broadcast_object,
        gather, recv, reduce_inplace, scatter, send,
    )
    from bagua_core.runtime.torch_groups import backend_of, rank_in, size_of

    n = 3
    me = (rank - 1) % n  # member j of the managed group is global rank j + 1 (mod 3)
    store = dist.TCPStore("127.0.0.1", port, n, rank == 0, timeout=timedelta(seconds=60))  # noqa: F841 (serves)
    ft_group = ProcessGroupGloo(timeout=timedelta(seconds=30))  # what fault-tolerant mode wraps (a ProcessGroup)
    ft_group.configure(f"127.0.0.1:{port}/managed", f"replica_{me}", me, n)
    errors: list[Exception] = []
    managed = ManagedGroup(ft_group.parent, me, n, "test_public", errors.append)
    comm = BaguaCommunicator(managed, managed.ranks, "test_public/global")
    out: dict = {"me": me, "comm_rank": comm.rank(), "backend": backend_of(managed), "comm_backend": comm.backend,
                 "rank_in": rank_in(managed), "size_of": size_of(managed), "small": comm.small_allreduce_bytes > 0}
    with pytest.raises(ValueError):  # not in torch's tables: what looks a group up there refuses it
        dist.get_backend(managed)
    with pytest.raises(ValueError):
        dist.get_rank(managed)

    small = torch.full((4,), float(me + 1))
    allreduce_inplace(small, ReduceOp.SUM, comm)  # small_allreduce's point-to-point messages
    large = torch.full((1 << 16,), float(me + 1))
    allreduce_inplace(large, ReduceOp.SUM, comm)  # gloo's ring
    out["allreduce"] = (small.tolist(), large[:2].tolist())
    t = torch.full((3,), float(me))
    broadcast(t, src=1, comm=comm)
    out["broadcast"] = t.tolist()
    t = torch.full((2,), float(me + 1))
    reduce_inplace(t, dst=2, op=ReduceOp.SUM, comm=comm)
    out["reduce"] = t.tolist() if me == 2 else None
    gathered = torch.zeros(n) if me == 0 else None
    gather(torch.tensor([float(me)]), gathered, 0, comm=comm)
    out["gather"] = gathered.tolist() if gathered is not None else None
    part = torch.zeros(1)
    scatter(torch.arange(n, dtype=torch.float32) * 10 if me == 2 else None, part, 2, comm=comm)
    out["scatter"] = part.tolist()
    everyone = torch.zeros(n)
    allgather(torch.tensor([float(me)]), everyone, comm=comm)
    out["allgather"] = everyone.tolist()
    exchanged = torch.zeros(n)
    alltoall(torch.tensor([float(10 * me + j) for j in range(n)]), exchanged, comm=comm)
    out["alltoall"] = exchanged.tolist()
    message = torch.full((2,), 7.0 if me == 0 else 0.0)
    if me == 0:
        send(message, 1, comm=comm)
    elif me == 1:
        recv(message, 0, comm=comm)
    out["p2p"] = message.tolist()
    out["object"] = broadcast_object({"from": me}, src=2, comm=comm)
    out["agreed"] = agreement.agree_or_raise(comm, lambda: me * 2)
    barrier(comm)
    out["errors"] = [str(e) for e in errors]
    return out


def _a_torch_group_out_of_global_order(rank: int) -> dict:
    from bagua_core.runtime.communication import ReduceOp, broadcast, recv, reduce_inplace, send
    from bagua_core.runtime.process_group import from_torch_group

    torch_group = dist.new_group([2, 0, 1], sort_ranks=False)  # group ranks: global 2 -> 0, 0 -> 1, 1 -> 2
    comm = from_torch_group(torch_group).get_global_communicator()  # members in global order
    t = torch.full((2,), float(rank))
    broadcast(t, src=0, comm=comm)  # global rank 0 (group rank 1)
    out = {"group_ranks": comm.group_ranks, "broadcast": t.tolist()}
    t = torch.full((1,), float(rank + 1))
    reduce_inplace(t, dst=2, op=ReduceOp.SUM, comm=comm)
    out["reduce"] = t.tolist() if rank == 2 else None
    message = torch.full((1,), 5.0 if rank == 2 else 0.0)
    if rank == 2:
        send(message, 1, comm=comm)
    elif rank == 1:
        recv(message, 2, comm=comm)
    out["p2p"] = message.tolist()
    return out


def _check_both(rank: int, port: int) -> tuple[dict, dict]:
    return _collectives_on_a_managed_group(rank, port), _a_torch_group_out_of_global_order(rank)


def test_every_core_collective_runs_on_a_managed_group_torch_never_registered() -> None:
    pytest.importorskip("torchft")
    results = run_workers(_check_both, 3, free_port(), timeout=180)
    by_member = {managed["me"]: managed for managed, _ in results}
    for j, out in by_member.items():
        assert out["errors"] == []
        assert (out["comm_rank"], out["rank_in"], out["size_of"]) == (j, j, 3)
        assert out["backend"] == out["comm_backend"] == "gloo" and out["small"]
        assert out["allreduce"] == ([6.0] * 4, [6.0, 6.0])
        assert out["broadcast"] == [1.0] * 3  # member 1's
        assert out["scatter"] == [10.0 * j]
        assert out["allgather"] == [0.0, 1.0, 2.0]
        assert out["alltoall"] == [float(10 * i + j) for i in range(3)]
        assert out["object"] == {"from": 2}
        assert out["agreed"] == 2 * j
    assert by_member[2]["reduce"] == [6.0, 6.0]
    assert by_member[0]["gather"] == [0.0, 1.0, 2.0]
    assert by_member[1]["p2p"] == [7.0, 7.0]
    unsorted = [out for _, out in results]
    assert all(out["group_ranks"] == [1, 2, 0] for out in unsorted)
    assert all(out["broadcast"] == [0.0, 0.0] for out in unsorted)
    assert unsorted[2]["reduce"] == [6.0] and unsorted[1]["p2p"] == [5.0]


def test_a_group_torch_made_names_its_backend_from_torch_a_managed_one_itself() -> None:
    from bagua_features.fault_tolerance.managed_group import ManagedGroup
    from bagua_core.runtime.communication.communicator import BaguaCommunicator
    from bagua_core.runtime.torch_groups import backend_of, rank_in, size_of

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        managed = ManagedGroup(object(), 1, 3, "test_names", lambda exc: None)
        assert (backend_of(None), backend_of(dist.group.WORLD), backend_of(managed)) == ("gloo", "gloo", "gloo")
        assert (rank_in(managed), size_of(managed), rank_in(None), size_of(None)) == (1, 3, 0, 1)
        comm = BaguaCommunicator(managed, managed.ranks, "test")
        assert (comm.rank(), comm.group_rank(2), comm.backend) == (1, 2, "gloo")
        with pytest.raises(ValueError, match="not in communicator"):
            comm.group_rank(3)
    finally:
        if started:
            dist.destroy_process_group()


def _ft_private_torch_names() -> list[str]:
    """Every private torch name the fault-tolerance package reaches that ``KNOWN_PRIVATE_TORCH`` does not list,
    every mention of torch's group tables, and every private attribute of ``ProcessGroup`` it reads or
    defines (``self._inner._get_backend(...)`` is rooted at no torch module, so the general scan misses it)."""
    pg_private = {n for n in dir(dist.ProcessGroup) if n.startswith("_") and not n.startswith("__")}
    tables = re.compile(r"\b(_world|pg_map|pg_names|pg_group_ranks|pg_backend_config)\b")
    found = []
    for path in sorted(FT_PACKAGE.rglob("*.py")):
        name, source = str(path.relative_to(ROOT)), path.read_text()
        found += sorted(private_torch_uses(source, name) - KNOWN_PRIVATE_TORCH)
        found += [f"{name}:{i}: {line.strip()}" for i, line in enumerate(source.splitlines(), 1)
                  if tables.search(line)]
        for node in ast.walk(ast.parse(source, name)):
            attr = node.attr if isinstance(node, ast.Attribute) else getattr(node, "name", None)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                attr = node.value
            if attr in pg_private:
                found.append(f"{name}:{node.lineno}: {attr}")
    return found


def test_the_fault_tolerance_package_uses_no_private_torch_table() -> None:
    found = _ft_private_torch_names()
    assert not found, "bagua_features/fault_tolerance reaches torch's private names (use the public API):\n" + \
        "\n".join(found)
    assert not [entry for entry in KNOWN_PRIVATE_TORCH if "fault_tolerance" in entry and "_world" in entry]


@pytest.mark.parametrize("source", ["w = dist.distributed_c10d._world", "world.pg_group_ranks[g] = {}",
                                    "b = self._inner._get_backend(device)", "_FORWARDED = ('_allgather_base',)",
                                    "def _get_backend(self, device): pass"])
def test_the_fault_tolerance_scan_finds(source: str, tmp_path: pathlib.Path, monkeypatch) -> None:
    package = tmp_path / "bagua_core" / "fault_tolerance"
    package.mkdir(parents=True)
    (package / "x.py").write_text(source + "\n")
    monkeypatch.setitem(globals(), "FT_PACKAGE", package)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert _ft_private_torch_names()
