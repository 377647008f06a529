"""What the original's own examples do with the collectives: alltoall_v with nranks + 1 displacements
(its communication-primitives example), and allgather / reduce_scatter without a warning that is not
the user's (torch 2.13 deprecates the calls behind them with a FutureWarning)."""

from __future__ import annotations

import warnings

import pytest
import torch

import bagua_core as bagua
from tests.distributed import run_workers


def _alltoall_v_with_extra_displacement(rank: int) -> list[int]:
    n = bagua.get_world_size()
    # as the original's example: one element per peer, displacements 0..n (n + 1 entries)
    send = torch.tensor([10 * rank + j for j in range(n)], dtype=torch.int64)
    recv = torch.full((n,), -1, dtype=torch.int64)
    counts, displs = [1] * n, list(range(n + 1))
    bagua.alltoall_v(send, counts, displs, recv, counts, displs)
    assert recv.tolist() == [10 * r + rank for r in range(n)]
    t = send.clone()
    bagua.alltoall_v_inplace(t, counts + [7], displs)  # longer counts too: only the first n are read
    assert t.tolist() == recv.tolist()
    with pytest.raises(ValueError, match=r"at least one entry per rank \(3\), got 2 and 4"):
        bagua.alltoall_v(send, counts[:2], displs, recv, counts, displs)
    return recv.tolist()


def test_alltoall_v_reads_the_first_nranks_entries() -> None:
    results = run_workers(_alltoall_v_with_extra_displacement, 3, timeout=120)
    assert results == [[0, 10, 20], [1, 11, 21], [2, 12, 22]]


def _gather_and_scatter_without_future_warning(rank: int) -> list[str]:
    n = bagua.get_world_size()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning, however often torch has raised it before
        out = torch.empty(2 * n)
        bagua.allgather(torch.full((2,), float(rank)), out)
        assert out.tolist() == [float(r) for r in range(n) for _ in range(2)]
        mine = torch.empty(2)
        bagua.reduce_scatter(torch.arange(2.0 * n), mine)
        assert mine.tolist() == [n * (2.0 * rank), n * (2.0 * rank + 1)]
        t = torch.arange(2.0 * n)
        bagua.reduce_scatter_inplace(t)
        bagua.allgather_inplace(t)
    return [f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, FutureWarning)]


def test_allgather_and_reduce_scatter_raise_no_future_warning() -> None:
    assert run_workers(_gather_and_scatter_without_future_warning, 2, timeout=120) == [[], []]


def test_no_first_party_call_of_the_deprecated_names() -> None:
    """torch 2.13 warns on every call of all_gather_into_tensor / reduce_scatter_tensor: first-party code
    calls them only through bagua_core.runtime.communication.torch_compat (the one place that picks the name)."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    deprecated = {"all_gather_into_tensor", "reduce_scatter_tensor", "_all_gather_base", "_reduce_scatter_base"}
    found = []
    for package in ("bagua_core", "bagua_algorithms", "bagua_codecs", "bagua_contrib", "bagua_examples", "bagua"):
        for path in sorted((root / package).rglob("*.py")):
            if path.name == "torch_compat.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in deprecated:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {node.func.attr}")
    assert not found, "deprecated torch collectives called directly:\n" + "\n".join(found)
