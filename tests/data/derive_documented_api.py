"""Derive the list of callables that the original Bagua 0.9.2 API pages document.

The pages are what sphinx-autoapi renders with the original's own ``docs/conf.py`` (its ignore lists,
skip rules and ``_autoapi_templates``) over ``bagua/torch_api``. This script builds those pages in a
scratch directory and reads every ``function``, ``class`` and ``method`` directive from them, with the
page (module) that documents it and the signature as rendered. The result is committed as
``tests/data/bagua_0_9_2_documented_api.json`` and checked by ``tests/test_compat_conformance.py``.

Run (needs ``pip install sphinx sphinx-autoapi`` in some environment; not a project dependency)::

    python tests/data/derive_documented_api.py /work/reference/bagua-0.9.2 > tests/data/bagua_0_9_2_documented_api.json

The original's html theme is replaced by sphinx's default one (the theme does not change the pages'
content); ``autoapi_keep_files`` keeps the generated rst to be read.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DIRECTIVE = re.compile(r"^( *)\.\. (function|class|method|attribute|data):: (\w+)(\((.*)\))?\s*$")


def build_pages(reference: Path, scratch: Path) -> Path:
    shutil.copytree(reference / "docs", scratch / "docs")
    shutil.copytree(reference / "bagua", scratch / "bagua")
    conf = scratch / "docs" / "conf.py"
    text = conf.read_text()
    text = re.sub(r"^html_theme = .*$", 'html_theme = "alabaster"', text, flags=re.M)
    text = text.replace("html_theme_options = {", "_unused_theme_options = {")
    conf.write_text(text + "\nautoapi_keep_files = True\n")
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "text", "-q", str(scratch / "docs"), str(scratch / "out")],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return scratch / "docs" / "autoapi"


def read_pages(autoapi: Path) -> list[dict]:
    entries = []
    for page in sorted(autoapi.rglob("index.rst")):
        module = ".".join(page.relative_to(autoapi).parts[:-1])
        if not module.startswith("bagua.torch_api"):
            continue
        current_class = None
        for line in page.read_text().splitlines():
            match = DIRECTIVE.match(line)
            if not match:
                continue
            indent, kind, name, _, args = match.groups()
            if not indent:
                current_class = name if kind == "class" else None
            if kind in ("attribute", "data"):
                continue
            qualname = f"{current_class}.{name}" if kind == "method" else name
            entries.append({"module": module, "name": qualname, "kind": kind, "signature": args})
    return entries


def main() -> None:
    reference = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/reference/bagua-0.9.2")
    with tempfile.TemporaryDirectory() as scratch:
        entries = read_pages(build_pages(reference, Path(scratch)))
    distinct = {(e["name"], e["signature"]) for e in entries if True}
    print(json.dumps({
        "source": "bagua 0.9.2 docs/conf.py + _autoapi_templates, rendered by sphinx-autoapi",
        "entries": entries,
        "distinct_callables": len(distinct),
    }, indent=1))


if __name__ == "__main__":
    main()
