"""The plugin boundary is the documented API: the built-in algorithms, the codecs and the example plugin import
from ``bagua_core`` only its three plugin modules (``bagua_core.api``, ``bagua_core.codecs``,
``bagua_core.kernels``), ``bagua_core.api.__all__`` is pinned here and documented in ``docs/plugins.md``, no
algorithm writes the core's state of a wrapped module, and none counts "every optimizer has stepped" itself
(the core's step-end hook does). Scanned through the AST: function-local and ``TYPE_CHECKING`` imports count."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLUGIN_PACKAGES = (ROOT / "bagua_algorithms", ROOT / "bagua_codecs", ROOT / "plugins_example" / "bagua_local_sgd",
                   ROOT / "plugins_example" / "tests")
PLUGIN_MODULES = {"bagua_core.api", "bagua_core.codecs", "bagua_core.kernels"}

PINNED_API = {
    "Algorithm", "AlgorithmConfig", "AlgorithmImpl", "Capabilities", "FaultTolerance", "RoundCount", "auto_candidate",
    "capabilities_of", "hookimpl", "hookspec", "algorithm_registry", "NamedRegistry", "get_plugin_manager",
    "BaguaBucket", "BucketOperand", "group_tensors", "split_into_buckets", "CentralizedSynchronousOp",
    "start_allreduce_in_pieces", "reduce_to_leader", "broadcast_from_leader", "resolve_group", "Segment", "segments",
    "schedule", "post_receives", "send_segment", "wait_all",
    "ReduceOp", "BaguaCommunicator", "allreduce_inplace", "allreduce_inplace_start", "allgather", "all_gather_single",
    "alltoall", "broadcast", "reduce_inplace", "isend", "irecv", "record_payload",
    "BaguaProcessGroup", "get_default_group_or_none", "Membership", "FIXED", "group_failure",
    "switch_algorithm", "set_gradient_sync", "is_wrapped", "is_sharded", "local_shard", "load_optimizer_state",
    "shard_group", "samples_in", "has_nonfinite",
    "Prepared", "agree_or_raise", "model_signature",
    "get_default_bucket_size", "get_comm_timeout_s", "get_nonfinite_policy", "get_rank", "get_world_size",
    "get_local_rank", "get_local_size", "init_process_group", "destroy_process_group", "on_one_node", "defaults_to_hierarchical",
    "without_hierarchy", "first_failure", "failure_guard", "translate_failure",
    "BaguaError", "BaguaConfigError", "RankMismatchError", "JobFailureError",
}
"""Changing the plugin API is deliberate: a name added or removed here is a change third parties see."""


def imported_core_modules(source: str, filename: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of a ``bagua_core`` module in ``source``, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "bagua_core"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "bagua_core":
            found.append((node.lineno, node.module))
    return found


def _plugin_sources() -> list[pathlib.Path]:
    return sorted(p for package in PLUGIN_PACKAGES for p in package.rglob("*.py") if "build" not in p.parts)


def test_plugins_import_only_the_plugin_modules() -> None:
    outside, used = [], set()
    for path in _plugin_sources():
        for line, module in imported_core_modules(path.read_text(), str(path)):
            used.add(module)
            if module not in PLUGIN_MODULES:
                outside.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    assert not outside, "plugin code reaches past bagua_core's plugin modules:\n" + "\n".join(outside)
    assert used <= PLUGIN_MODULES and "bagua_core.api" in used


@pytest.mark.parametrize("source", ["from bagua_core.lifecycle.bucket import BaguaBucket",
                                    "def f():\n    import bagua_core.runtime.env",
                                    "if TYPE_CHECKING:\n    from bagua_core.runtime import native"])
def test_the_scan_finds_an_import_past_the_api(source: str) -> None:
    assert [m for _, m in imported_core_modules(source, "x.py") if m not in PLUGIN_MODULES]


def test_the_api_is_pinned_and_every_name_imports() -> None:
    import bagua_core.api as api

    assert set(api.__all__) == PINNED_API, (sorted(set(api.__all__) - PINNED_API), sorted(PINNED_API - set(api.__all__)))
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert not missing


def test_every_api_name_is_documented_in_the_plugin_guide() -> None:
    import bagua_core.api as api
    import bagua_core.kernels as kernels

    guide = (ROOT / "docs" / "plugins.md").read_text()
    undocumented = [name for name in api.__all__ + kernels.__all__ if not re.search(rf"`{name}[`(]", guide)]
    assert not undocumented, f"docs/plugins.md does not name {undocumented}"


_STATE_WRITES = re.compile(r"\.(bagua_algorithm|bagua_capabilities|bagua_optimizers|bagua_train_step_counter|"
                           r"bagua_buckets|bagua_module_name|process_group|sync_enabled|declaration)\s*=(?!=)")


def test_no_plugin_writes_the_core_state_of_a_module() -> None:
    writes = []
    for path in _plugin_sources():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#")[0]
            if _STATE_WRITES.search(code) and "self.process_group =" not in code and "bucket.process_group" not in code:
                writes.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not writes, "plugin code writes the core's state (use bagua_core.api.switch_algorithm):\n" + "\n".join(writes)


def test_no_plugin_counts_its_optimizers_stepping() -> None:
    """"Every optimizer has stepped" is the core's event (``AlgorithmImpl.init_step_end_hook``)."""
    counting = []
    for path in _plugin_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "len" and node.args and \
                    isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "bagua_optimizers":
                counting.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not counting, f"plugin code counts the module's optimizers: {counting}"


def test_the_documented_attributes_of_a_wrapped_module_are_read_only() -> None:
    import torch

    from bagua_core.module.bagua_module import PROPERTIES

    model = torch.nn.Linear(2, 2)
    with pytest.raises(AttributeError, match="bagua_algorithm"):  # (torch's message: the property's is lost)
        model.bagua_algorithm  # noqa: B018
    assert isinstance(model.bagua_module_name, str)
    model.process_group = "a module's own"  # torch's SyncBatchNorm and DDP keep one: unwrapped modules still may
    assert model.process_group == "a module's own"
    read_only = [name for name, prop in PROPERTIES.items() if name not in ("process_group", "bagua_module_name")]
    assert read_only and all(prop.fset is not None for name, prop in PROPERTIES.items() if name in read_only)
    with pytest.raises(AttributeError, match="is bagua's"):
        model.bagua_algorithm = None


_IMPL_NAMES = {"impl", "bagua_algorithm", "declaration"}
"""What names an algorithm's impl (or its declaration) in the core: ``impl``, ``state.impl``, ``self.impl``,
``module.bagua_algorithm``, ``declaration``; inside ``class AlgorithmImpl`` also ``self``, ``cls`` and
``type(self)``."""


def _names_an_impl(node: ast.expr, in_impl_class: bool) -> bool:
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "type" and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Name):
        return node.id in _IMPL_NAMES or (in_impl_class and node.id in ("self", "cls"))
    return isinstance(node, ast.Attribute) and node.attr in _IMPL_NAMES


def impl_member_probes(source: str, filename: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every ``hasattr(X, ...)`` and ``getattr(X, ..., default)`` in ``source`` where ``X``
    names an algorithm impl: the core probing for a member the ``AlgorithmImpl`` contract does not define."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_impl_class: bool) -> None:
        if isinstance(node, ast.ClassDef):
            in_impl_class = node.name == "AlgorithmImpl"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args and (
                node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)) and \
                _names_an_impl(node.args[0], in_impl_class):
            found.append((node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, in_impl_class)

    visit(ast.parse(source, filename), False)
    return found


def test_the_core_probes_no_member_of_an_impl() -> None:
    """Every hook the core calls on an algorithm impl is a member of ``AlgorithmImpl`` with a documented default
    (docs/plugins.md), so the core calls it: no ``hasattr``/``getattr(..., default)`` on an impl."""
    probes = [f"{path.relative_to(ROOT)}:{line}: {code}"
              for path in sorted((ROOT / "bagua_core").rglob("*.py"))
              for line, code in impl_member_probes(path.read_text(), str(path))]
    assert not probes, ("the core probes an algorithm impl for a member (define it on AlgorithmImpl with a "
                        "default and use it):\n" + "\n".join(probes))


@pytest.mark.parametrize("source", ['x = hasattr(impl, "bucket_size_bytes")',
                                    'x = getattr(state.impl, "init_step_end_hook", None)',
                                    'x = callable(getattr(module.bagua_algorithm, "abort", None))',
                                    'class AlgorithmImpl:\n    def f(self):\n        return hasattr(type(self), "x")'])
def test_the_scan_finds_a_probe(source: str) -> None:
    assert impl_member_probes(source, "x.py")


def test_the_scan_leaves_other_objects_alone() -> None:
    assert not impl_member_probes('x = getattr(exc, "bagua_reported", False)\ny = getattr(impl, name)', "x.py")


class _HooksButNoImpl:
    """Has the hooks of an impl written for the original, but does not derive from ``AlgorithmImpl``."""

    def __init__(self, process_group: object) -> None:
        self.process_group = process_group

    def init_operations(self, bagua_module: object, bucket: object) -> None:  # pragma: no cover - never called
        raise AssertionError


def _reifies_something_else() -> object:
    from bagua_core.api import Algorithm

    class ReifiesSomethingElse(Algorithm):
        name = "reifies_something_else"

        def reify(self, process_group: object) -> object:
            return _HooksButNoImpl(process_group)

    return ReifiesSomethingElse()


def _install_a_non_impl(rank: int) -> list[str]:
    import torch

    from bagua_core.api import BaguaConfigError, switch_algorithm

    seen = []
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(BaguaConfigError) as info:
        model.with_bagua([optimizer], _reifies_something_else())
    seen.append(str(info.value))
    model = model.with_bagua([optimizer], "gradient_allreduce")
    with pytest.raises(BaguaConfigError) as info:
        switch_algorithm(model, impl=_HooksButNoImpl(model.process_group))
    seen.append(str(info.value))
    seen.append(type(model.bagua_algorithm).__name__)  # the impl running the module is left as it was
    return seen


def test_an_impl_not_derived_from_algorithm_impl_is_refused_where_it_is_installed() -> None:
    from tests.distributed import run_workers

    wrapped, switched, kept = run_workers(_install_a_non_impl, 1)[0]
    assert wrapped == ("ReifiesSomethingElse.reify() returned tests.test_plugin_api._HooksButNoImpl, not a "
                       "bagua_core.api.AlgorithmImpl subclass (an impl derives from AlgorithmImpl, whose hooks all "
                       "have defaults: docs/plugins.md)")
    assert switched.startswith("switch_algorithm(impl=...) for algorithm 'gradient_allreduce' was given "
                               "tests.test_plugin_api._HooksButNoImpl, not a bagua_core.api.AlgorithmImpl subclass")
    assert kept == "GradientAllReduceAlgorithmImpl"


def test_what_the_core_reads_of_an_impl_has_a_default() -> None:
    """The members docs/plugins.md lists beside the hooks, as an impl that sets none of them has them."""
    from bagua_core.api import AlgorithmImpl, get_default_bucket_size
    from bagua_algorithms.gradient_allreduce import GradientAllReduceConfig

    plain = AlgorithmImpl(None)
    assert plain.hierarchical is None and plain.bucket_size is None and plain.hands_module_over is False
    assert plain.bucket_size_bytes() == get_default_bucket_size() and plain.supports_autotune is None
    assert plain.init_bucket_ready_hook(None) is None and plain.init_step_end_hook(None) is None
    assert plain.abort(None) is None and plain.resume(None) is None and plain.rounds_completed() is None
    assert plain._older_form_capabilities() == {} and not plain._has_background_controls()

    impl = AlgorithmImpl(None, GradientAllReduceConfig(hierarchical=True))
    assert impl.hierarchical is True  # the config's option, until autotune (or the impl) sets it
    impl.hierarchical, impl.bucket_size = False, 1024
    assert impl.hierarchical is False and impl.config.hierarchical is True and impl.bucket_size_bytes() == 1024

    class OnlyAborts(AlgorithmImpl):  # background work needs both: abort alone declares nothing
        def abort(self, bagua_module) -> None: ...

    assert OnlyAborts(None)._older_form_capabilities() == {}
