"""The public API is pinned: ``bagua_core.__all__`` is exactly the first table of docs/api.md, every name
in it exists, the names ``bagua_core`` offers from the packages above it are the second table (entry points of
``bagua.moved``, ``bagua_core/moved.py``), and the paths that moved still import (with a DeprecationWarning naming
the new one)."""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

import bagua_core
from bagua_core import moved

API = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def _table(heading: str) -> list[list[str]]:
    text = API.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_the_documented_names_are_bagua_core_all() -> None:
    documented = [re.fullmatch(r"`([\w.]+)`", row[0]).group(1) for row in _table("`bagua_core`")]
    assert len(documented) == len(set(documented))
    assert sorted(documented) == sorted(bagua_core.__all__), (
        f"in docs/api.md only: {sorted(set(documented) - set(bagua_core.__all__))}; "
        f"in bagua_core.__all__ only: {sorted(set(bagua_core.__all__) - set(documented))}")
    assert all(hasattr(bagua_core, name) for name in bagua_core.__all__)


MOVED = moved.moved_modules()


def test_the_offered_names_are_the_second_table_and_import() -> None:
    rows = _table("Offered by `bagua_core`, living above it")
    documented = {re.fullmatch(r"`([\w.]+)`", row[0]).group(1): re.fullmatch(r"`([\w.:]+)`", row[1]).group(1)
                  for row in rows}
    offered = {old.split(".", 1)[1]: f"{module}:{attr}" for old, (module, attr) in moved.moved_names().items()
               if old.startswith("bagua_core.") and old.count(".") == 1}
    assert documented == offered
    for name, where in offered.items():
        module, attr = where.split(":")
        assert getattr(bagua_core, name) is getattr(importlib.import_module(module), attr)
        exec(f"from bagua_core import {name}", {})  # noqa: S102 (the documented form of the import)
    assert not set(offered) & set(bagua_core.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'not_offered'"):
        bagua_core.not_offered  # noqa: B018


def test_a_subpackage_of_the_core_offers_what_left_it() -> None:
    """``bagua_core.codecs.RowwiseCodec`` (a codec's building block, now ``bagua_codecs.rowwise``'s) still imports."""
    import bagua_core.codecs
    from bagua_codecs.rowwise import RowwiseCodec

    nested = {old: where for old, where in moved.moved_names().items() if old.count(".") > 1}
    assert nested == {"bagua_core.codecs.RowwiseCodec": ("bagua_codecs.rowwise", "RowwiseCodec")}
    assert bagua_core.codecs.RowwiseCodec is RowwiseCodec
    exec("from bagua_core.codecs import RowwiseCodec as offered", namespace := {})  # noqa: S102
    assert namespace["offered"] is RowwiseCodec


def test_the_moved_table_is_the_finder_s() -> None:
    pairs = [(re.fullmatch(r"`([\w.]+)`", old), re.fullmatch(r"`([\w.]+)`", new))
             for old, new in _table("Paths that moved")]
    documented = {old.group(1): new.group(1) for old, new in pairs if old and new and old.group(1) in MOVED}
    assert len(documented) == len(MOVED)
    assert documented == MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_path_imports_its_new_home_and_warns(old: str) -> None:
    new = MOVED[old]
    for name in (old, *[n for n in list(sys.modules) if n.startswith(old + ".")]):
        sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__.name == new  # the module keeps its own name
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)


def test_a_submodule_of_a_moved_package_follows_it() -> None:
    sys.modules.pop("bagua_core.communication.reduce_op", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from bagua_core.communication.reduce_op import ReduceOp
    assert ReduceOp is bagua_core.ReduceOp
    assert moved.new_name("bagua_core.processes") is None and moved.new_name("bagua_core.runtime.env") is None
