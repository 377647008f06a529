"""Launchers: ``python -m bagua.distributed.launch`` and ``python -m bagua.distributed.run``."""

from __future__ import annotations

__all__: list[str] = []
