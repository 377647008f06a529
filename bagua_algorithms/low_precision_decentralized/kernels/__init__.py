"""low_precision_decentralized's two steps of a round, for any codec, fused with MinMaxUInt8's kernels.

With ``x`` the stepped weights and ``w``, ``left``, ``right`` the replicas (fp32)::

    difference:  z = x + left/3 + right/3 - (5/3) w        (torch's fp32 order, one pass)
    update:      left += D(from_left); right += D(from_right); w += D(own); x = w

:func:`difference` and :func:`update` are what the op calls. For MinMaxUInt8 (the codec this package
knows, ``bagua_codecs.MinMaxUInt8Codec``) they are the fused kernels :func:`lpd_difference` (z and its
min/max in the same pass, so the header needs no second pass) and :func:`lpd_update` (three decodes and
the copy in one pass): C on fp32 CPU tensors (``BAGUA_NATIVE`` policy), CUDA where its kernels are
loaded, the torch :mod:`.reference` elsewhere. For any other codec: the same difference without
statistics, and the update composed of the codec's ``decode(..., accumulate=True)`` (:func:`composed_update`).
Every path gives the same bits as that composition.

Example::

    >>> stats = codec.new_stats() if fuses(codec) else None
    >>> difference(codec, x, w, left, right, z, stats)
    >>> codec.encode_headers_with_stats(z, 1, sent, stats)     # ... exchange C(z) with the neighbours ...
    >>> update(codec, from_left, from_right, sent, w, left, right, x, 0, z.numel())
"""

from __future__ import annotations

from bagua_algorithms.low_precision_decentralized.kernels.fused import (
    composed_update,
    difference,
    fuses,
    lpd_difference,
    lpd_update,
    update,
)

__all__ = ["composed_update", "difference", "fuses", "lpd_difference", "lpd_update", "update"]
