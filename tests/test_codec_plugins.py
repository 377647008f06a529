"""Codecs are plugins: the built-ins come through bagua's ``codecs`` entry point, a third party adds
its own from its own distribution or an inline plugin, names are unique, ``bagua plugins`` lists them."""

from __future__ import annotations

import importlib.metadata
import json
import sys

import pytest
import torch

from bagua_cli import main as bagua_main
from bagua_core.codecs import Codec, RowwiseCodec, codec_names, get_codec
from bagua_core.runtime.exceptions import DuplicateNameError, PluginError, UnknownNameError
from bagua_core.plugins import codec_registry, get_plugin_manager, hookimpl, reset_plugin_manager
from tests.test_plugins import _fake_distribution

FAKE_CODEC = """
    import torch
    from bagua_core.codecs import RowwiseCodec
    from bagua_core.plugins import hookimpl

    class Int8Symmetric(RowwiseCodec):
        name, bits_per_element, header_bytes = "acme_int8", 8, 4

        def row_headers(self, values):
            scale = values.abs().amax(dim=1, keepdim=True) / 127
            return scale.view(torch.uint8), torch.isfinite(scale).view(-1)

        def quantise(self, values, headers):
            scale = headers.contiguous().view(torch.float32)
            return (values / scale).round().clamp(-127, 127).to(torch.int8).view(torch.uint8)

        def dequantise(self, payload, headers, count):
            return payload[:, :count].contiguous().view(torch.int8).float() * headers.contiguous().view(torch.float32)

    @hookimpl
    def bagua_register_codecs():
        return [Int8Symmetric]
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_plugin_manager()
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("fake_bagua_")]:
        del sys.modules[name]
    reset_plugin_manager()


def test_builtins_come_through_the_entry_point() -> None:
    entry_points = {ep.name: ep for ep in importlib.metadata.entry_points(group="bagua")}
    assert entry_points["codecs"].value == "bagua_codecs.plugin"
    assert codec_names() == ["MinMaxUInt4", "MinMaxUInt8", "ScaledSign", "bf16", "fp16"]
    assert {plugin for _, plugin in codec_registry.providers().values()} == {"codecs"}


def test_a_third_party_registers_a_codec(site, capsys) -> None:
    _fake_distribution(site, "fake-bagua-codec", {"acme_codecs": "fake_bagua_codec"},
                       {"fake_bagua_codec": FAKE_CODEC})
    codec = get_codec("acme_int8")
    assert codec_registry.providers()["acme_int8"][1] == "acme_codecs"
    x = torch.randn(1000)
    out = codec.decode(codec.encode(x, 3), 3, torch.empty(1000))
    assert float((out - x).abs().max()) <= float(x.abs().max()) / 127
    assert bagua_main(["plugins", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)["codecs"]}
    assert listed["acme_int8"]["plugin"] == "acme_codecs" and listed["acme_int8"]["bits_per_element"] == 8
    assert "MinMaxUInt8" in listed and listed["MinMaxUInt8"]["native"] in (True, False)


class _Inline:
    def __init__(self, classes):
        self.classes = classes

    @hookimpl
    def bagua_register_codecs(self):
        return self.classes


class _Duplicate(RowwiseCodec):
    name = "fp16"


class _NotACodec:
    name = "not_a_codec"


def test_duplicate_unknown_and_foreign_classes() -> None:
    pm = get_plugin_manager()
    plugin = _Inline([_Duplicate])
    pm.register(plugin, name="inline-dup-codec")
    try:
        with pytest.raises(DuplicateNameError) as info:
            codec_names()
        assert "Float16Codec" in str(info.value) and "_Duplicate" in str(info.value) and "inline-dup-codec" in str(info.value)
    finally:
        pm.unregister(plugin)
    with pytest.raises(UnknownNameError, match=r"unknown codec 'MinMaxUint8' \(did you mean 'MinMaxUInt8'\?\); available: .*MinMaxUInt8"):
        get_codec("MinMaxUint8")
    plugin = _Inline([_NotACodec])
    pm.register(plugin, name="inline-foreign-codec")
    try:
        with pytest.raises(PluginError, match="does not derive from bagua_core.codecs.Codec"):
            get_codec("not_a_codec")
    finally:
        pm.unregister(plugin)
    assert isinstance(get_codec("fp16"), Codec)


def test_plugins_command_lists_codecs(capsys) -> None:
    assert bagua_main(["plugins"]) == 0
    text = capsys.readouterr().out
    assert "codecs (compression=):" in text and "MinMaxUInt4  4 bits/value" in text and "ScaledSign  1 bit/value" in text
