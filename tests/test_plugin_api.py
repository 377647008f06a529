"""The plugin boundary is the documented API: the built-in algorithms, the codecs and the example plugin import
from ``bagua_core`` only its three plugin modules (``bagua_core.api``, ``bagua_core.codecs``,
``bagua_core.kernels``; a plugin's test scripts also the user API, ``bagua_core``), ``bagua_core.api.__all__`` is pinned here and documented in ``docs/plugins.md``, no
algorithm writes the core's state of a wrapped module, and none counts "every optimizer has stepped" itself
(the core's step-end hook does). Scanned through the AST: function-local and ``TYPE_CHECKING`` imports count.

Between plugin packages the same holds one level up: a package that builds on another imports only the names
that package exports at its top level (its ``__init__.py``'s ``__all__``), overrides only its public extension
methods, and its C/CUDA sources include only the headers the other package ships in its ``include/`` folder."""

from __future__ import annotations

import ast
import pathlib
import re
import sys
import types

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLUGIN_PACKAGES = (ROOT / "bagua_algorithms", ROOT / "bagua_codecs", ROOT / "plugins_example" / "bagua_local_sgd",
                   ROOT / "plugins_example" / "tests",
                   ROOT / "plugins_example" / "gradient_clipping" / "bagua_gradient_clipping",
                   ROOT / "plugins_example" / "gradient_clipping" / "tests")
PLUGIN_MODULES = {"bagua_core.api", "bagua_core.codecs", "bagua_core.kernels"}

PINNED_API = {
    "Algorithm", "AlgorithmConfig", "AlgorithmImpl", "Capabilities", "FaultTolerance", "RoundCount",
    "capabilities_of", "hookimpl", "hookspec", "algorithm_registry", "NamedRegistry",
    "Feature", "FeatureConfig", "feature_registry",
    "BaguaBucket", "group_tensors", "CentralizedSynchronousOp",
    "start_allreduce_in_pieces", "hierarchy",
    "ReduceOp", "BaguaCommunicator", "allreduce_inplace", "allreduce_inplace_start", "allgather", "all_gather_single",
    "alltoall", "broadcast", "reduce_inplace", "isend", "irecv", "record_payload",
    "BaguaProcessGroup", "Membership", "group_failure",
    "WrappedModule", "tensors", "load_optimizer_state",
    "shard_group", "samples_in", "has_nonfinite",
    "agreement",
    "settings", "init_process_group", "on_one_node", "defaults_to_hierarchical",
    "without_hierarchy", "first_failure", "failure_guard", "translate_failure",
    "BaguaError", "BaguaConfigError", "RankMismatchError", "JobFailureError", "format_validation_error",
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


PLUGIN_TEST_SCRIPTS = (ROOT / "plugins_example" / "tests", ROOT / "plugins_example" / "gradient_clipping" / "tests")
"""A plugin's test scripts train as a user does: they may also import the user API, ``bagua_core`` itself
(``init_process_group``, ``get_rank``, ``destroy_process_group``, ...)."""


def test_plugins_import_only_the_plugin_modules() -> None:
    outside, used = [], set()
    for path in _plugin_sources():
        allowed = PLUGIN_MODULES | ({"bagua_core"} if any(path.is_relative_to(p) for p in PLUGIN_TEST_SCRIPTS)
                                    else set())
        for line, module in imported_core_modules(path.read_text(), str(path)):
            used.add(module)
            if module not in allowed:
                outside.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    assert not outside, "plugin code reaches past bagua_core's plugin modules:\n" + "\n".join(outside)
    assert used <= PLUGIN_MODULES | {"bagua_core"} and "bagua_core.api" in used


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
    assert not writes, "plugin code writes the core's state (use bagua_core.api.WrappedModule):\n" + "\n".join(writes)


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

    from bagua_core.module.bagua_module import PROPERTIES, BaguaModule, wrapped_class

    model = torch.nn.Linear(2, 2)
    assert not hasattr(model, "bagua_algorithm") and not hasattr(model, "bagua_module_name")  # a plain module
    model.process_group = "a module's own"  # torch's SyncBatchNorm and DDP keep one: unwrapped modules still may
    assert model.process_group == "a module's own"
    read_only = [name for name, prop in PROPERTIES.items() if name not in ("process_group", "bagua_module_name")]
    assert read_only and all(prop.fset is not None for name, prop in PROPERTIES.items() if name in read_only)
    model.__class__ = wrapped_class(torch.nn.Linear)  # what with_bagua does (no state yet: not wrapped)
    assert isinstance(model, BaguaModule) and isinstance(model, torch.nn.Linear)
    with pytest.raises(AttributeError, match="bagua_algorithm"):  # (torch's message: the property's is lost)
        model.bagua_algorithm  # noqa: B018
    assert isinstance(model.bagua_module_name, str)
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

    from bagua_core.api import BaguaConfigError, WrappedModule

    seen = []
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(BaguaConfigError) as info:
        model.with_bagua([optimizer], _reifies_something_else())
    seen.append(str(info.value))
    model = model.with_bagua([optimizer], "gradient_allreduce")
    with pytest.raises(BaguaConfigError) as info:
        WrappedModule(model).switch_algorithm(impl=_HooksButNoImpl(model.process_group))
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
    from bagua_core.api import AlgorithmImpl, settings
    from bagua_algorithms.gradient_allreduce import GradientAllReduceConfig

    plain = AlgorithmImpl(None)
    assert plain.hierarchical is None and plain.bucket_size is None and plain.hands_module_over is False
    assert plain.bucket_size_bytes() == settings.default_bucket_size()
    assert plain.init_bucket_ready_hook(None) is None and plain.init_step_end_hook(None) is None
    assert plain.abort(None) is None and plain.resume(None) is None and plain.rounds_completed() is None
    assert plain.need_reset() is False and plain.warming_up(None) is False  # no warmup: the impl's hooks from the wrap
    assert not plain._has_background_controls()
    assert not hasattr(plain, "supports_autotune")  # the original's impl-level form is bagua.torch_api's, not the core's

    impl = AlgorithmImpl(None, GradientAllReduceConfig(hierarchical=True))
    assert impl.hierarchical is True  # the config's option, until autotune (or the impl) sets it
    impl.hierarchical, impl.bucket_size = False, 1024
    assert impl.hierarchical is False and impl.config.hierarchical is True and impl.bucket_size_bytes() == 1024

    class OnlyAborts(AlgorithmImpl):  # background work needs both: abort alone is not the controls
        def abort(self, bagua_module) -> None: ...

    assert not OnlyAborts(None)._has_background_controls()

# --- one plugin package builds on another through what that package exports at its top level ----------------------
# A plugin package: bagua_algorithms/<name>, bagua_codecs, plugins_example/<name> (plugins_example/tests tests
# bagua_local_sgd). Another package's modules below its top level are its own to change; what it exports in its
# __init__.py (``__all__``, each name documented there) is the extension point (docs/plugins.md). In C, CUDA
# and C++ the same holds for headers: a package's public headers are in its ``include/`` folder, and a kernel
# set reaches them by naming the package in its kernels.toml's ``uses``.

NATIVE_SUFFIXES = (".c", ".h", ".cu", ".cuh", ".cc", ".cpp", ".hpp")


def _plugin_package_dirs() -> dict[str, pathlib.Path]:
    """``{module name: folder}`` of every plugin package."""
    found = {"bagua_codecs": ROOT / "bagua_codecs"}
    for parent, prefix in ((ROOT / "bagua_algorithms", "bagua_algorithms."), (ROOT / "plugins_example", "")):
        for folder in sorted(parent.iterdir()):
            if (folder / "__init__.py").is_file():
                found[prefix + folder.name] = folder
    return found


PLUGIN_PACKAGE_DIRS = _plugin_package_dirs()


def package_of_module(module: str) -> str | None:
    """The plugin package a module belongs to (``bagua_algorithms.diloco.exchange`` -> ``bagua_algorithms.diloco``)."""
    parts = module.split(".")
    for n in (2, 1):
        if ".".join(parts[:n]) in PLUGIN_PACKAGE_DIRS:
            return ".".join(parts[:n])
    return None


def package_of_path(path: pathlib.Path) -> str | None:
    """The plugin package a file of the tree belongs to."""
    if path.is_relative_to(ROOT / "plugins_example" / "tests"):
        return "bagua_local_sgd"
    owners = [name for name, folder in PLUGIN_PACKAGE_DIRS.items() if path.is_relative_to(folder)]
    return max(owners, key=len, default=None)


def exported_names(package: str) -> set[str]:
    """A package's ``__all__``, read from its ``__init__.py`` (no import)."""
    init = PLUGIN_PACKAGE_DIRS[package] / "__init__.py"
    for node in ast.parse(init.read_text(), str(init)).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if "__all__" in [getattr(t, "id", None) for t in targets]:
            return set(ast.literal_eval(node.value))
    return set()


def imports_below_top_level(source: str, filename: str, own: str | None) -> list[tuple[int, str]]:
    """``(line, what)`` of every import in ``source`` (of package ``own``) of another plugin package's module
    below its top level, or of a name that package does not export; function-local imports and
    ``importlib.import_module("...")`` with a literal name count."""
    found = []

    def check(line: int, module: str, names: tuple[str, ...] = ()) -> None:
        if module == "bagua_algorithms":  # from bagua_algorithms import diloco: a package's top level
            return
        package = package_of_module(module)
        if package is None or package == own:
            return
        if module != package:
            found.append((line, f"{module} (below {package})"))
            return
        hidden = sorted(set(names) - exported_names(package))
        if hidden:
            found.append((line, f"{', '.join(hidden)} from {package}, which does not export it (__all__)"))

    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            check(node.lineno, node.module, tuple(a.name for a in node.names))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in \
                ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            check(node.lineno, node.args[0].value)
    return found


def test_plugins_build_on_each_other_through_top_level_names_only() -> None:
    reaching = []
    for path in _plugin_sources():
        own = package_of_path(path)
        for line, what in imports_below_top_level(path.read_text(), str(path), own):
            reaching.append(f"{path.relative_to(ROOT)}:{line} ({own}): imports {what}")
    assert not reaching, ("plugin code imports another plugin package's internals; import the names it exports "
                          "at its top level (docs/plugins.md):\n" + "\n".join(reaching))


@pytest.mark.parametrize("source", ["from bagua_algorithms.diloco.exchange import FragmentExchange",
                                    "def f():\n    import bagua_codecs.minmax_kernels.layout",
                                    "from bagua_codecs import minmax_kernels",
                                    "from bagua_algorithms.diloco import Schedule",
                                    "import importlib\nimportlib.import_module('bagua_algorithms.bytegrad.compressed')",
                                    "if TYPE_CHECKING:\n    from bagua_algorithms.decentralized.weights import x"])
def test_the_scan_finds_an_import_below_another_packages_top_level(source: str) -> None:
    assert imports_below_top_level(source, "x.py", "bagua_algorithms.sparseloco")


@pytest.mark.parametrize("source", ["from bagua_algorithms.sparseloco.codec import ChunkTopK",
                                    "from bagua_algorithms.diloco import DiLoCoAlgorithmImpl",
                                    "import bagua_codecs", "from bagua_algorithms import diloco",
                                    "from bagua_core.api import Algorithm", "import torch.nn"])
def test_the_scan_lets_a_package_import_itself_and_top_level_names(source: str) -> None:
    assert not imports_below_top_level(source, "x.py", "bagua_algorithms.sparseloco")


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def _kernels_toml_of(path: pathlib.Path) -> pathlib.Path | None:
    """The kernels.toml of the kernel set a native file belongs to (in its folder or one above, inside its package)."""
    top = PLUGIN_PACKAGE_DIRS.get(package_of_path(path) or "", ROOT)
    for folder in path.parents:
        if (folder / "kernels.toml").is_file():
            return folder / "kernels.toml"
        if folder == top:
            return None
    return None


def public_include_dir(package_path: str) -> pathlib.Path | None:
    """The public include folder of the package named by a kernels.toml ``uses`` entry (its repository path:
    ``bagua_codecs``, ``bagua_algorithms/<name>``), or None when the entry is no package's top level."""
    folder = ROOT / package_path
    if folder not in PLUGIN_PACKAGE_DIRS.values() or not (folder / "include").is_dir():
        return None
    return folder / "include"


def reaching_includes(path: pathlib.Path, text: str) -> list[str]:
    """Every ``#include "..."`` of a native file of a plugin package that resolves into another plugin package
    other than through that package's public include folder, on the include path the build gives its kernel set
    (its folder, ``native/``, its own package's and each used package's ``include/``), or that is found only in
    another package's folder (the build's include path is the union of every set's)."""
    own_name = package_of_path(path)
    own = PLUGIN_PACKAGE_DIRS[own_name]
    toml = _kernels_toml_of(path)
    used = []
    if toml is not None:
        used = tomllib.loads(toml.read_text()).get("uses", [])
    search = [path.parent, *([toml.parent] if toml else []), ROOT / "native", own / "include",
              *(d for d in map(public_include_dir, used) if d is not None)]
    public = [d for d in map(public_include_dir, (str(f.relative_to(ROOT)) for f in PLUGIN_PACKAGE_DIRS.values()))
              if d is not None]
    found = []
    for name in _INCLUDE.findall(text):
        resolved = next(((d / name).resolve() for d in search if (d / name).is_file()), None)
        if resolved is None:
            elsewhere = sorted(str(p.relative_to(ROOT)) for f in PLUGIN_PACKAGE_DIRS.values() if f != own
                               for p in f.rglob(pathlib.Path(name).name) if "build" not in p.parts)
            if elsewhere:
                found.append(f'#include "{name}": found only in {elsewhere}')
            continue
        if resolved.is_relative_to(own) or resolved.is_relative_to(ROOT / "native"):
            continue
        if not any(resolved.is_relative_to(d) for d in public):
            found.append(f'#include "{name}": {resolved.relative_to(ROOT)}, inside another package')
    return found


def _native_sources() -> list[pathlib.Path]:
    return sorted(p for folder in PLUGIN_PACKAGE_DIRS.values() for p in folder.rglob("*")
                  if p.suffix in NATIVE_SUFFIXES and "build" not in p.relative_to(ROOT).parts)


def test_native_sources_include_only_public_headers_of_other_packages() -> None:
    assert _native_sources()
    reaching = [f"{p.relative_to(ROOT)}: {what}" for p in _native_sources()
                for what in reaching_includes(p, p.read_text())]
    assert not reaching, ("a C/CUDA source includes another package's internal header; include the headers that "
                          "package ships in its include/ folder (kernels.toml `uses`, docs/plugins.md):\n" +
                          "\n".join(reaching))


def test_kernel_sets_use_packages_by_their_top_level() -> None:
    wrong = []
    for toml in sorted(p for folder in PLUGIN_PACKAGE_DIRS.values() for p in folder.rglob("kernels.toml")):
        for entry in tomllib.loads(toml.read_text()).get("uses", []):
            if public_include_dir(entry) is None:
                wrong.append(f"{toml.relative_to(ROOT)}: uses {entry!r}, not a package with an include/ folder")
    assert not wrong, "\n".join(wrong)


_LPD_SOURCE = ROOT / "bagua_algorithms" / "low_precision_decentralized" / "kernels" / "native" / "x.c"


@pytest.mark.parametrize("text", ['#include "minmax_uint8.h"', '#include "minmax_uint8_cuda.h"',
                                  '#include "../../../../bagua_codecs/minmax_kernels/native/minmax_uint8.h"'])
def test_the_scan_finds_an_include_of_another_packages_internal_header(text: str) -> None:
    assert reaching_includes(_LPD_SOURCE, text)


@pytest.mark.parametrize("text", ['#include "minmax_uint8_blocks.h"', '#include "parallel.h"',
                                  '#include "low_precision_decentralized.h"', "#include <math.h>"])
def test_the_scan_lets_a_source_include_its_own_shared_and_public_headers(text: str) -> None:
    assert not reaching_includes(_LPD_SOURCE, text)


def test_every_public_include_folder_is_exported_by_its_package() -> None:
    """A package with an include/ folder says where it is at its top level (``include_dir()``), for a build
    outside this repository."""
    import importlib

    for name, package_folder in PLUGIN_PACKAGE_DIRS.items():
        folder = package_folder / "include"
        if not folder.is_dir():
            continue
        package = importlib.import_module(name)
        assert "include_dir" in package.__all__, name
        assert pathlib.Path(package.include_dir()).resolve() == folder.resolve()


def test_no_plugin_overrides_another_packages_private_method() -> None:
    """A subclass overrides what its base's package documents as an extension method (public), not its privates."""
    import importlib
    import inspect
    import pkgutil

    overriding = []
    for name, folder in PLUGIN_PACKAGE_DIRS.items():
        if not name.startswith("bagua_algorithms.") and name != "bagua_codecs":
            continue
        package = importlib.import_module(name)
        modules = [package] + [importlib.import_module(m.name) for m in
                               pkgutil.walk_packages(package.__path__, name + ".") if not m.name.endswith("__main__")]
        for module in modules:
            for cls in vars(module).values():
                if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                    continue
                for base in cls.__mro__[1:]:
                    other = package_of_module(base.__module__)
                    if other is None or other == name:
                        continue
                    for attr in vars(cls):
                        method = vars(cls)[attr]
                        if attr.startswith("_") and not attr.startswith("__") and attr in vars(base) and \
                                isinstance(method, (types.FunctionType, property, staticmethod, classmethod)):
                            overriding.append(f"{cls.__module__}.{cls.__qualname__}.{attr} overrides {other}'s "
                                              f"{base.__qualname__}.{attr}")
    assert not overriding, "\n".join(overriding)
