"""Every hook spec is documented in docs/plugins.md with its exact signature, and is exercised by a
named test that implements it (and no documented or mapped hook is stale)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from bagua_core.plugins import hookspecs

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "plugins.md"

# hook spec -> the test that implements and exercises it ("path::function")
HOOK_TESTS = {
    "bagua_register_algorithms": "tests/test_plugins.py::test_fake_distribution_is_discovered",
    "bagua_register_topologies": "tests/test_decentralized_dp_topologies.py::test_a_third_party_registers_a_topology",
    "bagua_register_cache_stores": "tests/test_contrib_cache.py::test_backend_is_a_plugin_and_values_are_not_pickled",
    "bagua_register_codecs": "tests/test_codec_plugins.py::test_a_third_party_registers_a_codec",
}


def _hookspec_signatures() -> dict[str, str]:
    """``name -> "def name(args) -> returns"`` for every function marked with ``@hookspec``, read from
    the source so the annotations appear as written."""
    tree = ast.parse(inspect.getsource(hookspecs))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "hookspec" for d in node.decorator_list):
            returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
            found[node.name] = f"def {node.name}({ast.unparse(node.args)}){returns}"
    return found


SIGNATURES = _hookspec_signatures()


def test_hookspecs_found_and_marked() -> None:
    assert SIGNATURES, "no hook spec found in bagua_core/plugins/hookspecs.py"
    for name in SIGNATURES:
        assert hasattr(getattr(hookspecs, name), "bagua_spec"), f"{name} is not a pluggy hook spec"


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_documented_with_its_exact_signature(name: str) -> None:
    guide = GUIDE.read_text()
    assert f"### `{name}`" in guide, f"docs/plugins.md has no section '### `{name}`'"
    section = guide.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    assert SIGNATURES[name] in section, f"docs/plugins.md must show `{SIGNATURES[name]}` in the {name} section"
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
