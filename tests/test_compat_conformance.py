"""Every callable the original Bagua 0.9.2 API pages document exists through ``bagua.torch_api`` with the
documented signature: the same parameter names in the same order, the same kinds (``*args``,
``**kwargs``) and the same defaults. This project's richer forms may add parameters after the
documented ones, each with a default, and may give a default to a documented required parameter
(``reduce``'s ``dst``: the older in-place call form of the seed docs); every documented call binds
the same way.

The list (``tests/data/bagua_0_9_2_documented_api.json``) was derived by
``tests/data/derive_documented_api.py``: the original's docs/conf.py and autoapi templates rendered by
sphinx-autoapi, every function, class and method directive of the ``bagua.torch_api`` pages.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from pathlib import Path

import pytest
import torch.distributed as dist

DATA = json.loads((Path(__file__).parent / "data" / "bagua_0_9_2_documented_api.json").read_text())
ENTRIES = DATA["entries"]
_NO_DEFAULT = object()


def _resolve(module: str, name: str):
    """Walk attributes from ``import bagua.torch_api`` alone: every documented page is reachable."""
    obj = importlib.import_module("bagua.torch_api")
    for part in module.split(".")[2:] + name.split("."):
        obj = getattr(obj, part)
    return obj


def _documented_parameters(signature: str) -> list[tuple[str, str, str | None]]:
    args = ast.parse(f"def f({signature}): pass").body[0].args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [(a.arg, "positional", None if d is None else ast.unparse(d)) for a, d in zip(positional, defaults)]
    if args.vararg:
        params.append((args.vararg.arg, "var_positional", None))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        params.append((a.arg, "keyword_only", None if d is None else ast.unparse(d)))
    if args.kwarg:
        params.append((args.kwarg.arg, "var_keyword", None))
    return params


def _our_signature(entry: dict, obj) -> inspect.Signature:
    if entry["kind"] != "method":
        return inspect.signature(obj)
    owner = _resolve(entry["module"], entry["name"].rsplit(".", 1)[0])
    raw = inspect.getattr_static(owner, entry["name"].rsplit(".", 1)[1])
    signature = inspect.signature(obj)
    if isinstance(raw, (classmethod, staticmethod)):
        return signature
    return signature.replace(parameters=list(signature.parameters.values())[1:])  # drop self


def _evaluate_default(source: str):
    from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm
    from bagua.torch_api.communication import ReduceOp

    namespace = {"ReduceOp": ReduceOp, "dist": dist, "GradientAllReduceAlgorithm": GradientAllReduceAlgorithm}
    return eval(source, namespace)  # noqa: S307 (trusted test data)


def _same_default(ours, documented_source: str) -> bool:
    expected = _evaluate_default(documented_source)
    if type(expected).__module__.startswith("bagua") and not isinstance(expected, int):
        return type(ours) is type(expected) and repr(ours) == repr(expected)
    return type(ours) is type(expected) and ours == expected or (ours is expected)


KINDS = {
    "positional": (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY),
    "var_positional": (inspect.Parameter.VAR_POSITIONAL,),
    "keyword_only": (inspect.Parameter.KEYWORD_ONLY,),
    "var_keyword": (inspect.Parameter.VAR_KEYWORD,),
}


def check_signature(entry: dict, signature: inspect.Signature) -> list[str]:
    problems = []
    documented = _documented_parameters(entry["signature"])
    ours = list(signature.parameters.values())
    # documented positional parameters: a prefix of ours, in order
    doc_positional = [p for p in documented if p[1] == "positional"]
    our_positional = [p for p in ours if p.kind in KINDS["positional"]]
    if [p[0] for p in doc_positional] != [p.name for p in our_positional[: len(doc_positional)]]:
        problems.append(f"positional parameters {[p[0] for p in doc_positional]} != ours {[p.name for p in our_positional]}")
        return problems
    for (name, _, default), param in zip(doc_positional, our_positional):
        if default is not None and (param.default is inspect.Parameter.empty or not _same_default(param.default, default)):
            problems.append(f"{name}: documented default {default}, ours {param.default!r}")
    for extra in our_positional[len(doc_positional):]:
        if extra.default is inspect.Parameter.empty:
            problems.append(f"extra parameter {extra.name} has no default (would break documented calls)")
    for name, kind, default in documented:
        if kind == "positional":
            continue
        match = [p for p in ours if p.kind in KINDS[kind] and (kind.startswith("var") or p.name == name)]
        if not match:
            problems.append(f"missing {kind} parameter {name}")
        elif default is not None and not _same_default(match[0].default, default):
            problems.append(f"{name}: documented default {default}, ours {match[0].default!r}")
    for extra in ours:
        if extra.kind is inspect.Parameter.KEYWORD_ONLY and extra.default is inspect.Parameter.empty:
            if not any(d[0] == extra.name for d in documented):
                problems.append(f"extra keyword-only parameter {extra.name} has no default")
    return problems


def test_the_list_is_what_the_derivation_found():
    assert len(ENTRIES) == 197
    assert DATA["distinct_callables"] == 133
    assert len({(e["module"], e["name"]) for e in ENTRIES}) == len(ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['module']}.{e['name']}" for e in ENTRIES])
def test_documented_callable(entry):
    obj = _resolve(entry["module"], entry["name"])
    if entry["kind"] == "class":
        assert inspect.isclass(obj), f"{entry['name']} should be a class, got {type(obj).__name__}"
    else:
        assert callable(obj)
    if entry["signature"] is None:
        return
    signature = _our_signature(entry, obj)
    aliases = getattr(obj, "bagua_module_parameter_names", ())
    documented_first = (entry["signature"] or "").split(",")[0].strip()
    if documented_first in aliases:  # the hook's module parameter is written bagua_module, takes bagua_ddp= too
        signature = signature.replace(parameters=[
            p.replace(name=documented_first) if p.name in aliases else p for p in signature.parameters.values()
        ])
    problems = check_signature(entry, signature)
    assert not problems, f"{entry['module']}.{entry['name']}({entry['signature']}): " + "; ".join(problems)


def test_the_checker_catches_a_wrong_signature():
    entry = {"module": "x", "name": "f", "kind": "function", "signature": "a, b = 1, *rest, **kw"}

    def good(a, b=1, c=2, *rest, **kw): ...
    def wrong_order(b, a=1, *rest, **kw): ...
    def wrong_default(a, b=2, *rest, **kw): ...
    def no_varargs(a, b=1, **kw): ...
    def required_extra(a, b=1, c=None, *rest, d, **kw): ...

    assert check_signature(entry, inspect.signature(good)) == []
    for bad in (wrong_order, wrong_default, no_varargs, required_extra):
        assert check_signature(entry, inspect.signature(bad)), bad.__name__
