"""Plugin discovery: real installed metadata, a fake distribution on sys.path, broken and duplicate
plugins, the disable switches, inline plugins registered and always unregistered."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
from pathlib import Path

import pluggy
import pytest

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig
from bagua_core.runtime.exceptions import DuplicateNameError, PluginError, PluginLoadError, UnknownNameError
from bagua_core.plugins import algorithm_registry, get_plugin_manager, hookimpl, reset_plugin_manager


def test_builtin_is_found_through_the_installed_entry_point() -> None:
    entry_points = {ep.name: ep for ep in importlib.metadata.entry_points(group="bagua")}
    assert entry_points["gradient_allreduce"].value == "bagua_algorithms.gradient_allreduce"
    assert entry_points["gradient_allreduce"].dist.metadata["Name"] == "bagua"
    cls, plugin = algorithm_registry.providers()["gradient_allreduce"]
    assert plugin == "gradient_allreduce" and cls.__name__ == "GradientAllReduceAlgorithm"


def _fake_distribution(root: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[bagua]\n{lines}\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))


FAKE_ALGORITHM = """
    from typing import Literal
    from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig, AlgorithmImpl
    from bagua_core.plugins import hookimpl

    class FakeConfig(AlgorithmConfig):
        name: Literal["{name}"] = "{name}"
        rounds: int = 3

    class FakeAlgorithm(Algorithm):
        name = "{name}"
        Config = FakeConfig
        def reify(self, process_group):
            return AlgorithmImpl(process_group)

    @hookimpl
    def bagua_register_algorithms():
        return [FakeAlgorithm]
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on sys.path for fake distributions; the manager is rebuilt before and after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_plugin_manager()
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("fake_bagua_")]:
        del sys.modules[name]
    reset_plugin_manager()


def test_fake_distribution_is_discovered(site) -> None:
    _fake_distribution(site, "fake-bagua-ext", {"fake_algo": "fake_bagua_ext"},
                       {"fake_bagua_ext": FAKE_ALGORITHM.format(name="fake_algo")})
    assert "fake_algo" in algorithm_registry.names()
    assert algorithm_registry.providers()["fake_algo"][1] == "fake_algo"
    from bagua_core.selection.config import resolve_algorithm

    assert resolve_algorithm({"name": "fake_algo", "rounds": 5}).config.rounds == 5


def test_disable_switches(site, monkeypatch) -> None:
    _fake_distribution(site, "fake-bagua-ext", {"fake_algo": "fake_bagua_ext"},
                       {"fake_bagua_ext": FAKE_ALGORITHM.format(name="fake_algo")})
    monkeypatch.setenv("BAGUA_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugin_manager()
    names = algorithm_registry.names()
    assert "fake_algo" not in names and "gradient_allreduce" in names  # built-ins still load
    monkeypatch.delenv("BAGUA_DISABLE_PLUGIN_AUTOLOAD")
    monkeypatch.setenv("BAGUA_DISABLE_PLUGINS", "fake_algo, gradient_allreduce")
    reset_plugin_manager()
    assert "fake_algo" not in algorithm_registry.names()
    assert "gradient_allreduce" not in algorithm_registry.names()


def test_broken_plugin_fails_loudly_with_its_name(site, monkeypatch) -> None:
    _fake_distribution(site, "fake-broken", {"broken_algo": "fake_bagua_broken"},
                       {"fake_bagua_broken": "import a_module_that_does_not_exist\n"})
    with pytest.raises(PluginLoadError, match=r"'broken_algo'.*fake-broken.*a_module_that_does_not_exist"):
        get_plugin_manager()
    monkeypatch.setenv("BAGUA_DISABLE_PLUGINS", "broken_algo")
    reset_plugin_manager()
    assert "gradient_allreduce" in algorithm_registry.names()


def test_two_distributions_with_the_same_entry_point_name(site) -> None:
    _fake_distribution(site, "fake-one", {"clash": "fake_bagua_one"}, {"fake_bagua_one": FAKE_ALGORITHM.format(name="a1")})
    _fake_distribution(site, "fake-two", {"clash": "fake_bagua_two"}, {"fake_bagua_two": FAKE_ALGORITHM.format(name="a2")})
    with pytest.raises(DuplicateNameError, match=r"fake-one.*fake-two|fake-two.*fake-one"):
        get_plugin_manager()


class _Dup(Algorithm):
    name = "gradient_allreduce"
    Config = AlgorithmConfig

    def reify(self, process_group):  # pragma: no cover - never built
        raise AssertionError


class _InlinePlugin:
    def __init__(self, classes):
        self.classes = classes

    @hookimpl
    def bagua_register_algorithms(self):
        return self.classes


def test_duplicate_algorithm_name_names_both_providers() -> None:
    pm = get_plugin_manager()
    plugin = _InlinePlugin([_Dup])
    pm.register(plugin, name="inline-dup")
    try:
        with pytest.raises(DuplicateNameError) as info:
            algorithm_registry.names()
        message = str(info.value)
        assert "GradientAllReduceAlgorithm" in message and "_Dup" in message and "inline-dup" in message
    finally:
        pm.unregister(plugin)
    assert "gradient_allreduce" in algorithm_registry.names()


def test_class_without_name_and_unknown_name() -> None:
    class Nameless(Algorithm):
        def reify(self, process_group):  # pragma: no cover
            raise AssertionError

    pm = get_plugin_manager()
    plugin = _InlinePlugin([Nameless])
    pm.register(plugin, name="inline-nameless")
    try:
        with pytest.raises(PluginError, match="has no `name`"):
            algorithm_registry.names()
    finally:
        pm.unregister(plugin)
    with pytest.raises(UnknownNameError) as info:
        algorithm_registry.get("gradient_allreduse")
    assert "'gradient_allreduse'" in str(info.value) and "gradient_allreduce" in str(info.value)


def test_misspelt_hook_implementation_fails_at_start_up(site) -> None:
    _fake_distribution(site, "fake-typo", {"typo": "fake_bagua_typo"}, {"fake_bagua_typo": """
        from bagua_core.plugins import hookimpl

        @hookimpl
        def bagua_register_algoritms():
            return []
    """})
    with pytest.raises(pluggy.PluginValidationError, match="bagua_register_algoritms"):
        get_plugin_manager()
