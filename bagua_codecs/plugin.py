"""The module named by bagua's ``codecs`` entry point: it registers the built-in codecs."""

from __future__ import annotations

from bagua_codecs import BUILTIN_CODECS
from bagua_core.api import hookimpl
from bagua_core.codecs import Codec

__all__ = ["bagua_register_codecs"]


@hookimpl
def bagua_register_codecs() -> list[type[Codec]]:
    return list(BUILTIN_CODECS)
