"""The LM benchmark's evaluation averages the ranks' weights through files (off the emulated link): the same
average as an allreduce, over the whole world and over a subgroup (the sharded benchmark's replicate
group), the local weights back after the block and no file left behind."""

from __future__ import annotations

from pathlib import Path

from tests.distributed import run_workers


def _average_both_ways(rank: int, folder: str) -> dict:
    import torch
    import torch.distributed as dist

    from benchmarks.lm_measure import averaged_weights

    torch.manual_seed(rank)  # every rank its own weights
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))
    before = [p.detach().clone() for p in model.parameters()]
    seen = {}
    pairs = dist.new_group([0, 2]), dist.new_group([1])  # every rank creates every group
    mine = pairs[0] if rank in (0, 2) else pairs[1]
    for label, group in (("world", None), ("group", mine)):
        for via in (None, Path(folder)):
            with torch.no_grad(), averaged_weights(model, group, via=via):  # as the benchmark's evaluation
                seen[label, via is None] = [p.detach().clone() for p in model.parameters()]
            assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before)), "local weights not back"
    dist.barrier()
    return {"equal": {label: all(torch.allclose(a, b, rtol=0, atol=1e-6)
                                 for a, b in zip(seen[label, True], seen[label, False]))
                      for label in ("world", "group")},
            "moved": any(not torch.equal(a, b) for a, b in zip(seen["world", False], before)),
            "alone": all(torch.equal(a, b) for a, b in zip(seen["group", False], before)),
            "left": sorted(p.name for p in Path(folder).iterdir())}


def test_the_average_through_files_equals_the_allreduce(tmp_path: Path) -> None:
    results = run_workers(_average_both_ways, 3, str(tmp_path), timeout=120)
    for rank, result in enumerate(results):
        assert result["equal"] == {"world": True, "group": True}, f"rank {rank}: {result}"
        assert result["moved"], f"rank {rank}: the world average is its own weights"
        assert result["alone"] == (rank == 1), f"rank {rank}: a one-rank group averages nothing, others do"
        assert result["left"] == [], f"rank {rank}: files left behind: {result['left']}"
