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
    # torchft's process group wrappers (their gloo group is the public ``parent``)
    "_pg",
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


TORCH_ROOTS = {"torch", "dist", "c10d", "distributed_c10d"}
"""Names the product binds torch's modules to (``import torch.distributed as dist``)."""
FOREACH = "_foreach_"
"""torch's fused multi-tensor ops (``torch._foreach_add_``, ...): what torch's own optimizers run; left out."""
KNOWN_PRIVATE_TORCH = {
    # the end of backward (torch has no public callback at the end of the autograd engine's run): replicated, after
    # every gradient, a reentrant checkpoint's nested backward included (register_multi_grad_hook ends at one
    # graph task's last parameter, and raises in autograd.grad on parameters); sharded, after FSDP2's own
    # callback (hooks._queue_end_of_backward, tests/test_end_of_backward.py)
    "bagua_core/module/hooks.py: Variable._execution_engine",
}
"""The private torch APIs the product still uses, each with why (issue: at most one, documented). A new one fails
:func:`test_no_new_private_torch_api`; one removed must leave this list too."""


def private_torch_uses(source: str, filename: str) -> set[str]:
    """``file: dotted.name`` of every private torch name ``source`` reaches: an import from a private torch module
    or of a private name, an attribute chain rooted at a torch module with a private link, and ``._version``."""
    found = set()
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            parts = node.module.split(".")
            private = [p for p in parts if p.startswith("_")]
            if private:
                found.add(f"{filename}: {'.'.join(parts[:parts.index(private[0]) + 1])}")
            else:
                found |= {f"{filename}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")}
        elif isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.insert(0, inner.attr)
                inner = inner.value
            if node.attr == "_version":
                found.add(f"{filename}: ._version")
            if not (isinstance(inner, ast.Name) and (inner.id in TORCH_ROOTS or inner.id == "Variable")):
                continue
            chain.insert(0, inner.id)
            private = [i for i, p in enumerate(chain) if p.startswith("_") and not p.startswith("__")]
            if private and not chain[private[0]].startswith(FOREACH):
                found.add(f"{filename}: {'.'.join(chain[max(private[0] - 1, 0):private[0] + 1])}")
    return found


def _product_private_torch_uses() -> set[str]:
    found = set()
    for folder in ("bagua_core", "bagua_algorithms", "bagua_codecs", "bagua"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "build" not in path.relative_to(ROOT).parts and not path.name.endswith("_ffi.py"):
                found |= private_torch_uses(path.read_text(), str(path.relative_to(ROOT)))
    return found


def test_no_new_private_torch_api() -> None:
    found = _product_private_torch_uses()
    new, gone = sorted(found - KNOWN_PRIVATE_TORCH), sorted(KNOWN_PRIVATE_TORCH - found)
    assert not new, "private torch APIs used (use a public one, or say why in KNOWN_PRIVATE_TORCH):\n" + "\n".join(new)
    assert not gone, "no longer used: take these out of KNOWN_PRIVATE_TORCH:\n" + "\n".join(gone)


@pytest.mark.parametrize("source, name", [
    ("from torch._utils import _flatten_dense_tensors", "torch._utils"),
    ("raw = torch._C._cuda_getCurrentRawStream(0)", "torch._C"),
    ("class W(dist._Work): pass", "dist._Work"),
    ("store = dist.distributed_c10d._get_default_store()", "distributed_c10d._get_default_store"),
    ("torch.autograd.Variable._execution_engine.queue_callback(f)", "Variable._execution_engine"),
    ("from torch.distributed.distributed_c10d import _world", "torch.distributed.distributed_c10d._world"),
    ("v = grad._version", "._version"),
])
def test_the_scan_finds_a_private_torch_api(source: str, name: str) -> None:
    assert private_torch_uses(source, "x.py") == {f"x.py: {name}"}


def test_the_scan_leaves_public_torch_and_foreach_alone() -> None:
    assert not private_torch_uses("torch._foreach_add_(xs, 1)\nx = dist.Work\ny = torch.cuda.current_stream(0).cuda_stream\n"
                                  "from torch.distributed import ProcessGroup\nz = module.__class__", "x.py")
