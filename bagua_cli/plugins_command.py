"""``bagua plugins`` (what is installed, with options and defaults) and ``bagua check-config``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from typing import Any

from pydantic_core import PydanticUndefined

from bagua_core.lifecycle.capabilities import Capabilities
from bagua_core.codecs import describe_codecs
from bagua_cli.arguments import parser_flags, short_usage_errors
from bagua_cli.jobs import job_config_tables
from bagua_core.selection.config import validate_config_file
from bagua_core.plugins import algorithm_registry, feature_registry, get_plugin_manager, registration_hooks
from bagua_core.selection.config import features_table, load_config_file
from bagua_core.selection.single_node import HIERARCHICAL_NOTE, defaults_to_hierarchical

__all__ = ["plugins_command", "check_config_command", "describe_algorithms", "describe_features"]


def _type_name(annotation: Any) -> str:
    """A field's type as a user writes its value: ``one of 'all', 'shift_one'``, ``int or None``, ``list[int]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)  # Optional[int] -> "int or None"
    if annotation is type(None):
        return "None"
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (tuple, list) and (origin is list or (len(args) == 2 and args[1] is Ellipsis)):
        return f"list of {_type_name(args[0])}"  # tuple[str, ...]: what a user writes is a list
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _plain(text: str | None) -> str:
    """A field's docstring as one line of plain text (no reStructuredText quoting, no line breaks)."""
    return " ".join((text or "").replace("``", "").split())


def _options(config: Any) -> list[dict[str, Any]]:
    """Every option of a config model but ``name``: its type as a user writes it, default and docstring."""
    options = []
    for field_name, field in config.model_fields.items():
        if field_name == "name":
            continue
        default = None if field.default is PydanticUndefined else field.default
        options.append({"name": field_name, "type": _type_name(field.annotation), "default": default,
                        "required": field.is_required(), "help": _plain(field.description)})
    return options


def describe_features() -> list[dict[str, Any]]:
    """Every installed feature: its name, the plugin, the package and the distribution that provide it, its class,
    scope (``module`` or ``process``), the ``init_process_group`` argument of a process feature, and its options."""
    manager = get_plugin_manager()
    rows = []
    for name, (cls, plugin) in sorted(feature_registry.providers().items()):
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        rows.append({"name": name, "plugin": plugin, "package": manager.packages.get(plugin, cls.__module__),
                     "distribution": manager.distributions.get(plugin, "(registered at run time)"),
                     "class": f"{cls.__module__}.{cls.__qualname__}", "scope": cls.scope,
                     "init_argument": cls.init_argument, "help": _plain(doc), "options": _options(cls.Config)})
    return rows


def _print_options(options: list[dict[str, Any]]) -> None:
    for option in options:
        default = "required" if option["required"] else f"default {option['default']!r}"
        print(f"      {option['name']}: {option['type']} = {default}  {option['help']}")


def describe_algorithms() -> list[dict[str, Any]]:
    rows = []
    for name, (cls, plugin) in sorted(algorithm_registry.providers().items()):
        options = _options(cls.Config)
        caps = dataclasses.asdict(getattr(cls, "capabilities", None) or Capabilities())
        notes = [HIERARCHICAL_NOTE] if defaults_to_hierarchical(cls.Config) else []
        rows.append({"name": name, "plugin": plugin, "class": f"{cls.__module__}.{cls.__qualname__}", "options": options,
                     "capabilities": caps, "notes": notes})
    return rows


def _describe_capabilities(caps: dict[str, Any]) -> str:
    defaults = dataclasses.asdict(Capabilities())
    flags = [k for k, v in caps.items() if isinstance(v, bool) and v != defaults[k]]
    shown = [f"communicates {caps['communicates']}", f"relative_bytes {caps['relative_bytes']}"]
    ft = caps.get("fault_tolerance")
    own = f" but not {'/'.join(ft['per_replica_state'])} (per replica)" if ft and ft.get("per_replica_state") else ""
    tolerance = [f"fault-tolerant (heals {'/'.join(ft['heals'])}{own}, commits {ft['commit'].replace('_', ' ')})"
                 if ft else "not fault-tolerant"]
    return ", ".join(shown + [k if caps[k] else f"not {k}" for k in flags] + tolerance)


def _names(registry) -> list[dict[str, str]]:
    return [{"name": n, "plugin": p} for n, (_, p) in sorted(registry.providers().items())]


def plugins_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bagua plugins", description="list installed bagua plugins")
    parser.add_argument("--json", action="store_true", help="print JSON")
    with short_usage_errors(parser.prog, parser_flags(parser)):
        args = parser.parse_args(argv)
    # every other registration hook (the plugin packages' own specs, e.g. topologies, cache stores)
    others = {key: _names(registry) for key, registry in registration_hooks().items()
              if key not in ("algorithms", "codecs", "features")}
    report = {"algorithms": describe_algorithms(), "features": describe_features(), **others,
              "codecs": describe_codecs()}
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    print("algorithms:")
    for row in report["algorithms"]:
        print(f"  {row['name']}  ({row['class']}, plugin {row['plugin']!r})")
        print("      capabilities: " + _describe_capabilities(row["capabilities"]))
        _print_options(row["options"])
        for note in row["notes"]:
            print(f"      note: {note}")
    print("features (with_bagua(..., features={name: {options}}), [features.<name>] in a config file, "
          "bagua train --feature NAME):")
    for row in report["features"]:
        scope = (f"for the whole process: init_process_group({row['init_argument']}=...)" if row["scope"] == "process"
                 else "per wrap")
        print(f"  {row['name']}  (package {row['package']}, distribution {row['distribution']!r}, {scope})  "
              f"{row['help']}")
        _print_options(row["options"])
    for key in others:
        print(f"{key.replace('_', ' ')}: " + (", ".join(r["name"] for r in report[key]) or "none"))
    print("codecs (compression=):")
    for row in report["codecs"]:
        kind = ("unbiased" if row["unbiased"] else "biased") + (", native" if row["native"] else "")
        bits = row["bits_per_element"]
        print(f"  {row['name']}  {bits} bit{'' if bits == 1 else 's'}/value + {row['header_bytes']} header bytes/chunk, "
              f"{kind}  ({row['class']}, plugin {row['plugin']!r})")
    return 0


def check_config_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bagua check-config",
                                     description="validate every table of a bagua config file: the algorithm "
                                                 "and the tables the installed jobs read ([training])")
    parser.add_argument("file")
    with short_usage_errors(parser.prog, parser_flags(parser)):
        args = parser.parse_args(argv)
    algorithm, tables = validate_config_file(args.file, job_config_tables())
    features = features_table(load_config_file(args.file), args.file)
    parts = [f"algorithm {algorithm.name}: {algorithm.model_dump(exclude={'name'})}" if algorithm is not None
             else "no algorithm (the job's default)"]
    parts += [f"feature {feature.name}: {feature.canonical_options()}" for feature in features]
    parts += [f"[{name}]: {table.model_dump(exclude_unset=True)}" for name, table in tables.items()]
    print(f"{args.file}: ok ({'; '.join(parts)})")
    return 0
