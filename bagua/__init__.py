"""The original Bagua's import paths (``import bagua.torch_api as bagua``), backed by this project.

Every name here is this project's own object (``bagua_core``, ``bagua_algorithms``, ``bagua_contrib``),
re-exported under the path the original documented; thin adapters only where a documented signature
differs. See docs/migrating.md."""

from __future__ import annotations

from bagua_core import __version__

__all__ = ["__version__"]
