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

Another package uses this one through its codecs (``bagua_core.codecs.get_codec``) and the names below
(``__all__``); its modules (``minmax_kernels`` and the rest) are this package's to change. The extension points,
for a package that fuses its own kernels with MinMaxUInt8's buffers (``low_precision_decentralized`` does), are
MinMaxUInt8's layout and its torch reference, which such a kernel must equal bit for bit:

- ``MinMaxUInt8Codec``, ``MinMaxUInt4Codec``, ``Float16Codec``, ``BFloat16Codec``, ``ScaledSignCodec``: the codec
  classes (``isinstance`` tells which codec a package can fuse with); not meant to be subclassed.
- ``minmax_uint8_compressed_size(numel, n_chunks=1)``: the bytes of a MinMaxUInt8 buffer of ``numel`` values in
  ``n_chunks`` chunks (``[fp32 min][fp32 max][one byte per value][zero padding to 8 bytes]`` per chunk).
- ``check_minmax_uint8_buffer(buf, numel, n_chunks, name)``: raises unless ``buf`` is such a buffer (contiguous
  uint8, that size); the check before a kernel reads one.
- ``merge_minmax_stats(stats, values)``: merges ``values``' min, max and NaN flag into the running
  ``{min, max, NaN seen}`` of ``MinMaxUInt8Codec.new_stats()`` (torch), what a fused kernel gathers in its pass.
- ``decompress_minmax_uint8_reference(buf, n_chunks, out, accumulate, begin=0, end=None)``: the torch decode
  (``out = D(buf)``, or ``out += D(buf)``), the reference of every native decode.
- ``BUILTIN_CODECS``: the classes this package registers.
- ``include_dir()``: the folder of this package's public C and CUDA headers, ``bagua_codecs/include/``:
  ``minmax_uint8_blocks.h`` (MinMaxUInt8's C building blocks: the chunk parameters, ``minmax_range``,
  ``quantise``, ``dequantise``, ``merge_stats``; defined in bagua's CPU library, so only a kernel built into it
  links to them) and ``minmax_uint8_cuda_blocks.cuh`` (the device building blocks, header only). A kernel set
  of bagua's build includes them by naming the package in its ``kernels.toml``, ``uses = ["bagua_codecs"]``
  (docs/native.md); the codec's other C and CUDA files are its own.

Example::

    >>> from bagua_core.codecs import get_codec
    >>> get_codec("MinMaxUInt4").encoded_size(1000)
    512
"""

from __future__ import annotations

import os

from bagua_codecs.floats import BFloat16Codec, Float16Codec
from bagua_codecs.minmax import MinMaxUInt4Codec, MinMaxUInt8Codec
from bagua_codecs.minmax_kernels.fallback import decompress as decompress_minmax_uint8_reference
from bagua_codecs.minmax_kernels.fallback_fused import merge_stats as merge_minmax_stats
from bagua_codecs.minmax_kernels.layout import check_buffer as check_minmax_uint8_buffer
from bagua_codecs.minmax_kernels.layout import compressed_size as minmax_uint8_compressed_size
from bagua_codecs.sign import ScaledSignCodec

__all__ = ["MinMaxUInt8Codec", "MinMaxUInt4Codec", "Float16Codec", "BFloat16Codec", "ScaledSignCodec", "BUILTIN_CODECS",
           "check_minmax_uint8_buffer", "decompress_minmax_uint8_reference", "merge_minmax_stats",
           "minmax_uint8_compressed_size", "include_dir"]

BUILTIN_CODECS = [MinMaxUInt8Codec, MinMaxUInt4Codec, Float16Codec, BFloat16Codec, ScaledSignCodec]


def include_dir() -> str:
    """The folder of this package's public C and CUDA headers (``minmax_uint8_blocks.h``,
    ``minmax_uint8_cuda_blocks.cuh``): what a kernel of another package may include."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
