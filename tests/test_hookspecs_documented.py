"""Every hook spec (the core's and those the plugin packages add) is documented in docs/plugins.md with
its exact signature, and is exercised by a named test that implements it (and no documented or mapped
hook is stale)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from bagua_core.plugins import get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "plugins.md"

# hook spec -> the test that implements and exercises it ("path::function")
HOOK_TESTS = {
    "bagua_add_hookspecs": "tests/test_plugin_hookspecs.py::test_a_package_brings_its_own_spec",
    "bagua_register_algorithms": "tests/test_plugins.py::test_fake_distribution_is_discovered",
    "bagua_register_topologies": "tests/test_decentralized_dp_topologies.py::test_a_third_party_registers_a_topology",
    "bagua_register_cache_stores": "tests/test_contrib_cache.py::test_backend_is_a_plugin_and_values_are_not_pickled",
    "bagua_register_codecs": "tests/test_codec_plugins.py::test_a_third_party_registers_a_codec",
    "bagua_register_features": "tests/test_features.py::test_a_third_party_registers_a_feature",
}


def _hookspec_signatures() -> dict[str, tuple[str, object]]:
    """``name -> ("def name(args) -> returns", module)`` for every function marked with ``@hookspec``
    in every spec module the installed plugins add (the core's first), read from the source so the
    annotations appear as written."""
    found = {}
    for module in get_plugin_manager().spec_modules():
        for node in ast.parse(inspect.getsource(module)).body:
            marked = any(ast.unparse(d).startswith("hookspec") for d in getattr(node, "decorator_list", ()))
            if isinstance(node, ast.FunctionDef) and marked:
                returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
                found[node.name] = (f"def {node.name}({ast.unparse(node.args)}){returns}", module)
    return found


SIGNATURES = _hookspec_signatures()


def test_hookspecs_found_and_marked() -> None:
    assert SIGNATURES, "no hook spec found in the spec modules"
    for name, (_, module) in SIGNATURES.items():
        assert hasattr(getattr(module, name), "bagua_spec"), f"{name} is not a pluggy hook spec"


def test_plugin_packages_bring_their_own_specs() -> None:
    """The core specifies only the hooks whose contract it holds; the others come from their packages."""
    owners = {name: module.__name__ for name, (_, module) in SIGNATURES.items()}
    assert owners["bagua_register_algorithms"] == owners["bagua_register_codecs"] == "bagua_core.plugins.hookspecs"
    assert "bagua_register_bucket_ops" not in owners  # an algorithm imports its ops: no registry between them
    assert owners["bagua_register_topologies"] == "bagua_algorithms.decentralized_dp.hookspecs"
    assert owners["bagua_register_cache_stores"] == "bagua_contrib.hookspecs"


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_documented_with_its_exact_signature(name: str) -> None:
    guide = GUIDE.read_text()
    assert f"### `{name}`" in guide, f"docs/plugins.md has no section '### `{name}`'"
    section = guide.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    signature = SIGNATURES[name][0]
    assert signature in section, f"docs/plugins.md must show `{signature}` in the {name} section"
    assert HOOK_TESTS.get(name, "<none>") in section, f"the {name} section must name its test"


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_exercised_by_a_named_test(name: str) -> None:
    assert name in HOOK_TESTS, f"map {name} to the test that exercises it in HOOK_TESTS"
    path, function = HOOK_TESTS[name].split("::")
    source = (ROOT / path).read_text()
    functions = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
    assert function in functions, f"{HOOK_TESTS[name]} does not exist"
    assert re.search(rf"def {name}\(", source), f"{path} does not implement {name}"


def test_nothing_stale() -> None:
    assert set(HOOK_TESTS) == set(SIGNATURES)
    documented = set(re.findall(r"^### `(bagua_\w+)`", GUIDE.read_text(), flags=re.M))
    assert documented == set(SIGNATURES), f"documented hooks that are not specs: {documented - set(SIGNATURES)}"
