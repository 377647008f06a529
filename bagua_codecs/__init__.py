"""The built-in codecs, registered through the ``bagua`` entry point ``codecs`` exactly as a third
party registers its own (hook ``bagua_register_codecs``, see ``bagua_codecs.plugin``).

| name | bits per value | header per chunk | what it stores |
| --- | ---: | ---: | --- |
| ``MinMaxUInt8`` | 8 | fp32 min, max | ``rint`` onto 256 levels between min and max (native kernels) |
| ``MinMaxUInt4`` | 4 | fp32 min, max | the same formula with 16 levels, two values per byte |
| ``fp16`` | 16 | none | the values in IEEE half precision (overflow becomes inf) |
| ``bf16`` | 16 | none | the values in bfloat16 |
| ``ScaledSign`` | 1 | fp32 scale | ``mean(abs(x)) * sign(x)`` (sign(0) = +1), eight values per byte |

All are deterministic, hence biased: use them with error feedback where the bias matters.

Example::

    >>> from bagua_core.codecs import get_codec
    >>> get_codec("MinMaxUInt4").encoded_size(1000)
    512
"""

from __future__ import annotations

from bagua_codecs.floats import BFloat16Codec, Float16Codec
from bagua_codecs.minmax import MinMaxUInt4Codec, MinMaxUInt8Codec
from bagua_codecs.sign import ScaledSignCodec

__all__ = ["MinMaxUInt8Codec", "MinMaxUInt4Codec", "Float16Codec", "BFloat16Codec", "ScaledSignCodec", "BUILTIN_CODECS"]

BUILTIN_CODECS = [MinMaxUInt8Codec, MinMaxUInt4Codec, Float16Codec, BFloat16Codec, ScaledSignCodec]
