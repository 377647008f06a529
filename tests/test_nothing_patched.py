"""Nothing patched onto torch: ``import bagua_core`` (and every plugin) adds one name to torch's classes,
``nn.Module.with_bagua``; a wrapped module's class is ``Bagua<Class>`` (as ``fully_shard``'s ``FSDP<Class>``); the original's ``bagua_*`` names of tensors and process groups come with
``bagua.torch_api``; and no plugin, nor the core, reaches a module, tensor or group through those names."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]

TENSOR_NAMES = {
    "bagua_backend_tensor", "bagua_ensure_grad", "bagua_getter_closure", "bagua_mark_communication_ready",
    "bagua_mark_communication_ready_without_synchronization", "bagua_module_name", "bagua_set_storage",
    "bagua_setter_closure", "bagua_tensor_name", "ensure_bagua_tensor", "is_bagua_tensor", "to_bagua_tensor",
}
MODULE_NAMES = {
    "_bagua_backend", "bagua_algorithm", "bagua_autotune_result", "bagua_buckets", "bagua_build_params",
    "bagua_capabilities", "bagua_checkpoint_state", "bagua_ddp", "bagua_load_checkpoint_state", "bagua_metrics",
    "bagua_module_name", "bagua_named_buffers", "bagua_named_parameters", "bagua_optimizers", "bagua_reset",
    "bagua_shutdown", "bagua_train_step_counter", "bagua_wait_for_communication", "no_sync",
}
GROUP_NAMES = {"bagua_patch", "bagua_pg", "bagua_get_global_communicator", "bagua_get_inter_node_communicator",
               "bagua_get_intra_node_communicator"}
"""The original's names of a tensor, a wrapped module and a torch process group."""
MODULE_RECEIVERS = {"bagua_module", "bagua_ddp", "module", "model"}
"""What a module is called where ``.process_group`` is read from it (an impl's, bucket's or op's own is not)."""
PLUGIN_ROOTS = ("bagua_algorithms", "bagua_codecs", "plugins_example")

_ADDED = """
import json, sys, torch, torch.distributed as dist
before = {c: set(vars(c)) for c in (torch.Tensor, torch.nn.Module, dist.ProcessGroup)}
for name in [a for a in sys.argv[1:] if not a.startswith("--")]:
    __import__(name)
if "--plugins" in sys.argv:
    from bagua_core.plugins import algorithm_registry
    for name in algorithm_registry.names():
        algorithm_registry.get(name)
print(json.dumps({c.__name__: sorted(set(vars(c)) - before[c]) for c in before}))
"""


def _added_by(*modules: str) -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", _ADDED, *modules], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_bagua_core_and_every_plugin_adds_only_with_bagua() -> None:
    added = _added_by("bagua_core", "bagua_core.api", "bagua_algorithms", "--plugins")
    assert added == {"Tensor": [], "Module": ["with_bagua"], "ProcessGroup": []}


def test_the_original_api_adds_its_names_when_imported() -> None:
    added = _added_by("bagua.torch_api")
    assert set(added["Tensor"]) == TENSOR_NAMES and set(added["ProcessGroup"]) == GROUP_NAMES
    assert added["Module"] == ["with_bagua"]  # a wrapped module has the rest (its class: Bagua<Class>)


def test_a_wrapped_module_is_its_class_and_bagua_module() -> None:
    from bagua_core.module.bagua_module import BaguaModule, shutdown, wrapped_class

    made = wrapped_class(torch.nn.Linear)
    assert made is wrapped_class(torch.nn.Linear) and made.__name__ == "BaguaLinear"  # one per class
    assert issubclass(made, BaguaModule) and issubclass(made, torch.nn.Linear) and wrapped_class(made) is made
    assert MODULE_NAMES - {"no_sync"} <= set(dir(made)) and not set(dir(torch.nn.Linear)) & MODULE_NAMES
    model = torch.nn.Linear(2, 2)
    model.__class__ = made
    shutdown(model)  # not wrapped (no state): nothing to undo, and it stays one (as a module shut down does)
    shutdown(model)
    assert type(model) is made and not hasattr(model, "bagua_algorithm")


def patched_name_uses(source: str, filename: str, core: bool = False) -> list[str]:
    """``file:line: .name`` of every read of a tensor's, wrapped module's or torch group's original name in
    ``source`` (``.process_group`` only where read from a module; in the core, not from ``self``)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Attribute):
            continue
        receiver = node.value.id if isinstance(node.value, ast.Name) else None
        if core and receiver == "self":
            continue
        if node.attr in TENSOR_NAMES | MODULE_NAMES | GROUP_NAMES or (
                node.attr == "process_group" and receiver in MODULE_RECEIVERS):
            found.append(f"{filename}:{node.lineno}: .{node.attr}")
    return found


def _sources(*roots: str):
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "/build/" not in relative:
                yield relative, path.read_text()


def test_no_plugin_uses_a_patched_name() -> None:
    found = [use for name, text in _sources(*PLUGIN_ROOTS) for use in patched_name_uses(text, name)]
    assert not found, ("plugins reach a module, tensor or group through the original's names (use "
                       "bagua_core.api.WrappedModule and bagua_core.api.tensors):\n" + "\n".join(found))


def test_the_core_uses_no_patched_name() -> None:
    found = [use for name, text in _sources("bagua_core") for use in patched_name_uses(text, name, core=True)]
    assert not found, "the core reaches a module, tensor or group through the original's names:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    "def init_tensors(self, bagua_module):\n    return bagua_module.bagua_build_params()",
    "x = p.bagua_getter_closure()",
    "comm = bagua_ddp.process_group.get_global_communicator()",
    "group.bagua_patch().bagua_pg",
])
def test_the_scan_finds_a_patched_name(source: str) -> None:
    assert patched_name_uses(source, "x.py")


def test_the_scan_leaves_an_impls_own_group_alone() -> None:
    assert not patched_name_uses("comm = self.process_group.get_global_communicator()", "x.py")
    assert not patched_name_uses("comm = bucket.process_group", "x.py")
