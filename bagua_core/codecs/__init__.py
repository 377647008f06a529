"""Codecs: named compressors that algorithms select with ``compression="<name>"``.

Codecs are plugins: a plugin returns :class:`Codec` subclasses (or ``RowwiseCodec`` ones, written from three
vectorised functions: ``bagua_codecs.rowwise``, still importable from here) from the hook
``bagua_register_codecs`` (the built-ins, in the ``bagua_codecs`` package, are registered the same
way). ``bagua plugins`` lists what is installed; an unknown name lists the available ones. Each
algorithm that compresses keeps its own documented default codec.

Example::

    >>> from bagua_core.codecs import get_codec, codec_names
    >>> codec_names()
    ['MinMaxUInt4', 'MinMaxUInt8', 'ScaledSign', 'bf16', 'fp16']
    >>> codec = get_codec("MinMaxUInt4")
    >>> buf = codec.encode(torch.randn(1000))          # 8 + 500 bytes, padded to 512
    >>> codec.decode(buf, 1, torch.empty(1000))
"""

from __future__ import annotations

import difflib

from bagua_core import moved as _moved
from bagua_core.codecs.base import Codec
from bagua_core.runtime.exceptions import PluginError

__all__ = ["Codec", "get_codec", "codec_names", "check_codec_name", "describe_codecs"]


def __getattr__(name: str) -> object:
    """A name offered here by a package above the core (``RowwiseCodec``, ``bagua_codecs.rowwise``'s)."""
    return _moved.offered_name(__name__, name)


def _registry():
    from bagua_core.plugins import codec_registry

    return codec_registry


def get_codec(name: str) -> Codec:
    """An instance of the codec registered as ``name`` (``UnknownNameError`` lists the installed ones)."""
    cls = _registry().get(name)
    if not (isinstance(cls, type) and issubclass(cls, Codec)):
        raise PluginError(f"codec {name!r} is registered by {cls!r}, which does not derive from bagua_core.codecs.Codec")
    return cls()


def codec_names() -> list[str]:
    """The names of every installed codec, sorted."""
    return _registry().names()


def check_codec_name(name: str | None) -> str | None:
    """``name`` if a codec of that name is installed (None passes); else ValueError listing the installed
    ones. For an algorithm config's ``compression`` field::

        _compression = field_validator("compression")(lambda cls, v: check_codec_name(v))
    """
    if name is not None:
        names = codec_names()
        if name not in names:
            close = difflib.get_close_matches(str(name), names, n=1)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown codec {name!r}{guess}; available: {', '.join(names)}")
    return name


def describe_codecs() -> list[dict]:
    """One row per installed codec: name, plugin, class, bits per element, header bytes, unbiased, native."""
    rows = []
    for name, (cls, plugin) in sorted(_registry().providers().items()):
        codec = get_codec(name)
        rows.append({"name": name, "plugin": plugin, "class": f"{cls.__module__}.{cls.__qualname__}",
                     "bits_per_element": codec.bits_per_element, "header_bytes": codec.header_bytes,
                     "unbiased": codec.unbiased, "native": codec.native})
    return rows
