"""``bagua plugins`` (what is installed, with options and defaults) and ``bagua check-config``."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from pydantic_core import PydanticUndefined

from bagua_core.capabilities import Capabilities
from bagua_core.codecs import describe_codecs
from bagua_core.config import algorithm_config_of
from bagua_core.plugins import algorithm_registry, registration_hooks

__all__ = ["plugins_command", "check_config_command", "describe_algorithms"]


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def describe_algorithms() -> list[dict[str, Any]]:
    rows = []
    for name, (cls, plugin) in sorted(algorithm_registry.providers().items()):
        options = []
        for field_name, field in cls.Config.model_fields.items():
            if field_name == "name":
                continue
            default = None if field.default is PydanticUndefined else field.default
            options.append({"name": field_name, "type": _type_name(field.annotation), "default": default,
                            "required": field.is_required(), "help": field.description or ""})
        caps = dataclasses.asdict(getattr(cls, "capabilities", None) or Capabilities())
        rows.append({"name": name, "plugin": plugin, "class": f"{cls.__module__}.{cls.__qualname__}", "options": options,
                     "capabilities": caps})
    return rows


def _describe_capabilities(caps: dict[str, Any]) -> str:
    defaults = dataclasses.asdict(Capabilities())
    flags = [k for k, v in caps.items() if isinstance(v, bool) and v != defaults[k]]
    shown = [f"communicates {caps['communicates']}", f"relative_bytes {caps['relative_bytes']}"]
    ft = caps.get("fault_tolerance")
    tolerance = [f"fault-tolerant (heals {'/'.join(ft['heals'])}, commits {ft['commit'].replace('_', ' ')})"
                 if ft else "not fault-tolerant"]
    return ", ".join(shown + [k if caps[k] else f"not {k}" for k in flags] + tolerance)


def _names(registry) -> list[dict[str, str]]:
    return [{"name": n, "plugin": p} for n, (_, p) in sorted(registry.providers().items())]


def plugins_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bagua plugins", description="list installed bagua plugins")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    # every other registration hook (the plugin packages' own specs, e.g. topologies, cache stores)
    others = {key: _names(registry) for key, registry in registration_hooks().items()
              if key not in ("algorithms", "codecs")}
    report = {"algorithms": describe_algorithms(), **others, "codecs": describe_codecs()}
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    print("algorithms:")
    for row in report["algorithms"]:
        print(f"  {row['name']}  ({row['class']}, plugin {row['plugin']!r})")
        print("      capabilities: " + _describe_capabilities(row["capabilities"]))
        for option in row["options"]:
            default = "required" if option["required"] else f"default {option['default']!r}"
            print(f"      {option['name']}: {option['type']} = {default}  {option['help']}")
    for key in others:
        print(f"{key.replace('_', ' ')}: " + (", ".join(r["name"] for r in report[key]) or "none"))
    print("codecs (compression=):")
    for row in report["codecs"]:
        kind = ("unbiased" if row["unbiased"] else "biased") + (", native" if row["native"] else "")
        print(f"  {row['name']}  {row['bits_per_element']} bits/value + {row['header_bytes']} header bytes/chunk, "
              f"{kind}  ({row['class']}, plugin {row['plugin']!r})")
    return 0


def check_config_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bagua check-config", description="validate a bagua config file")
    parser.add_argument("file")
    args = parser.parse_args(argv)
    config = algorithm_config_of(args.file)
    print(f"{args.file}: ok ({config.name}: {config.model_dump(exclude={'name'})})")
    return 0
