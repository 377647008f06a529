"""bagua meets FSDP2, DTensor and torchft through their public APIs only: no private attribute of theirs is read
or written anywhere in the tree (a private field moves between releases without notice). Scanned through the
AST: attribute accesses and ``getattr``/``setattr`` with a literal name."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCANNED = ("bagua_core", "bagua_algorithms", "bagua_codecs", "bagua_contrib", "bagua", "bagua_examples", "benchmarks",
           "plugins_example/bagua_local_sgd")
PRIVATE = {
    # FSDP2 (torch.distributed.fsdp._fully_shard)
    "_get_fsdp_state", "_fsdp_param_groups", "_fsdp_params", "_all_reduce_hook", "_all_reduce_hook_stream",
    "_reduce_scatter_process_group", "_all_reduce_process_group", "_partial_reduce_output", "_state_ctx",
    "mesh_info", "replicate_process_group", "replicate_mesh_size", "replicate_mesh_rank", "shard_process_group",
    "_is_hsdp", "comm_ctx", "_post_reduce_event",
    # DTensor
    "_local_tensor", "_spec",
    # torchft's Manager
    "_quorum_id", "_participating_replica_rank",
}


def private_uses(source: str, filename: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "setattr", "hasattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
            name = node.args[1].value
        if name in PRIVATE:
            found.append(f"{filename}:{node.lineno}: {name}")
    return found


def test_no_private_field_of_fsdp2_dtensor_or_torchft_is_used() -> None:
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "build" not in path.relative_to(ROOT).parts:
                found += private_uses(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "private fields of torch/torchft used (use their public API):\n" + "\n".join(found)


@pytest.mark.parametrize("source", ["groups = m._get_fsdp_state()._fsdp_param_groups",
                                    "x = getattr(dtensor, '_local_tensor')", "q = manager._quorum_id",
                                    "group.mesh_info.replicate_process_group = solo"])
def test_the_scan_finds_a_private_field(source: str) -> None:
    assert private_uses(source, "x.py")
