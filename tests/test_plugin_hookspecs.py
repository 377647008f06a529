"""A plugin package brings its own hook specs (``bagua_add_hookspecs``, like pytest's ``pytest_addhooks``):
found through entry points in any order, listed by ``bagua plugins``, added once however many of the
package's plugins add them, absent (not an error) when every plugin of the package is disabled."""

from __future__ import annotations

import json

import pluggy
import pytest

from bagua_cli import main as bagua_main
from bagua_core.plugins import NamedRegistry, get_plugin_manager, hookimpl
from tests.test_plugins import _fake_distribution, site  # noqa: F401  (site is a fixture)

SPEC_PACKAGE = """
    from bagua_core.plugins import NamedRegistry, hookimpl
    from bagua_core.plugins.hookspecs import hookspec

    class specs:
        @staticmethod
        @hookspec
        def bagua_register_widgets() -> list[type]:
            '''Widget classes, each with a ``name``.'''

    widget_registry = NamedRegistry("widget", "bagua_register_widgets")

    class Gear:
        name = "gear"

    @hookimpl
    def bagua_add_hookspecs(plugin_manager):
        plugin_manager.add_hookspecs(specs)

    @hookimpl
    def bagua_register_widgets():
        return [Gear]
"""

THIRD_PARTY = """
    from bagua_core.plugins import hookimpl

    class Cog:
        name = "cog"

    @hookimpl
    def bagua_register_widgets():
        return [Cog]
"""


def test_a_package_brings_its_own_spec(site, capsys) -> None:  # noqa: F811
    # the implementation's distribution sorts (and loads) before the one that adds the spec
    _fake_distribution(site, "fake-bagua-a-cogs", {"fake_cogs": "fake_bagua_a_cogs"}, {"fake_bagua_a_cogs": THIRD_PARTY})
    _fake_distribution(site, "fake-bagua-widgets", {"fake_widgets": "fake_bagua_widgets"},
                       {"fake_bagua_widgets": SPEC_PACKAGE})
    import fake_bagua_widgets

    pm = get_plugin_manager()
    assert fake_bagua_widgets.specs in pm.spec_modules()
    assert pm.hook.bagua_register_widgets.spec is not None
    providers = fake_bagua_widgets.widget_registry.providers()
    assert {name: plugin for name, (_, plugin) in providers.items()} == {"gear": "fake_widgets", "cog": "fake_cogs"}
    pm.add_hookspecs(fake_bagua_widgets.specs)  # a second addition is a no-op, not a duplicate-spec error
    assert bagua_main(["plugins", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["widgets"] == [{"name": "cog", "plugin": "fake_cogs"}, {"name": "gear", "plugin": "fake_widgets"}]
    assert bagua_main(["plugins"]) == 0
    assert "widgets: cog, gear" in capsys.readouterr().out


def test_an_implementation_without_its_package_spec_is_refused(site, monkeypatch) -> None:  # noqa: F811
    _fake_distribution(site, "fake-bagua-a-cogs", {"fake_cogs": "fake_bagua_a_cogs"}, {"fake_bagua_a_cogs": THIRD_PARTY})
    with pytest.raises(pluggy.PluginValidationError, match="unknown hook 'bagua_register_widgets'"):
        get_plugin_manager()


def test_a_plugin_registered_at_run_time_adds_its_spec(site) -> None:  # noqa: F811
    class RunTime:
        class specs:
            @staticmethod
            def bagua_register_gadgets() -> list[type]: ...

        from bagua_core.plugins.hookspecs import hookspec

        specs.bagua_register_gadgets = staticmethod(hookspec(specs.bagua_register_gadgets))

        @hookimpl
        def bagua_add_hookspecs(self, plugin_manager):
            plugin_manager.add_hookspecs(self.specs)

    pm = get_plugin_manager()
    pm.register(RunTime(), name="test-gadgets")  # historic: called at registration, long after start-up
    try:
        assert pm.hook.bagua_register_gadgets.spec is not None
        assert NamedRegistry("gadget", "bagua_register_gadgets").names() == []
    finally:
        pm.unregister(name="test-gadgets")


@pytest.mark.parametrize("disabled", ["decentralized_dp", "decentralized_dp_topologies",
                                      "decentralized_dp,decentralized_dp_topologies"])
def test_the_topology_spec_comes_with_either_plugin(site, monkeypatch, disabled) -> None:  # noqa: F811
    monkeypatch.setenv("BAGUA_DISABLE_PLUGINS", disabled)
    from bagua_algorithms.decentralized_dp.topology import topology_registry

    pm = get_plugin_manager()
    both = "," in disabled
    assert (getattr(pm.hook, "bagua_register_topologies", None) is None) == both
    expected = [] if disabled != "decentralized_dp" else ["alternating-exp-ring", "complete", "one-peer-exp", "ring"]
    assert topology_registry.names() == expected
