"""``bytegrad``: gradient allreduce with MinMaxUInt8 compression, every rank bit-identical.

Communicated: each bucket of gradients as uint8 (plus an fp32 min/max per chunk): the bucket is padded
to a multiple of the number of ranks n (repeating its last value) and split into n chunks; each chunk
is compressed and sent to its owner (alltoall), which averages (or sums) the decompressed chunks in
fp32, compresses the result again and allgathers it; every rank decompresses the same bytes.
Hierarchical: averaged inside the node (full precision) first, the compressed exchange runs among the
node leaders, and the result is broadcast inside the node.

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl),
:mod:`.compressed` (the bucket op and the plain exchange), :mod:`.compressed_pipeline` (its two
rounds over the pipelined-exchange engine), :mod:`.pipeline` (that engine), :mod:`.workspace` (the buffers
kept between steps). Another package imports only the names below (``__all__``); the modules are this package's to change.

Extension point: ``CompressedAllReduceOp(group, hierarchical, average, compression)``, the bucket op of the
compressed exchange above, for any algorithm that allreduces a bucket through a codec (qadam's momentum
exchange appends it). Append it to a bucket as it is (``bucket.append_op``); it is not meant to be subclassed.
The pipelined-exchange engine it runs on (``segments``, ``schedule``, ``post_receives``, ``send_segment``,
``wait_all``, ``Segment``: :mod:`.pipeline`), for another package's compressed exchange loop
(low_precision_decentralized's ring).

Example::

    >>> from bagua_algorithms.bytegrad import ByteGradAlgorithm
    >>> model = model.with_bagua([optimizer], ByteGradAlgorithm(hierarchical=False))
    >>> model = model.with_bagua([optimizer], {"name": "bytegrad", "compression": "MinMaxUInt4"})  # 4 bits
"""

from __future__ import annotations

from bagua_algorithms.bytegrad.algorithm import ByteGradAlgorithm, ByteGradAlgorithmImpl
from bagua_algorithms.bytegrad.compressed import CompressedAllReduceOp
from bagua_algorithms.bytegrad.config import ByteGradConfig
from bagua_algorithms.bytegrad.pipeline import Segment, post_receives, schedule, segments, send_segment, wait_all
from bagua_core.api import Algorithm, hookimpl

__all__ = ["ByteGradAlgorithm", "ByteGradAlgorithmImpl", "ByteGradConfig", "CompressedAllReduceOp", "Segment",
           "post_receives", "schedule", "segments", "send_segment", "wait_all"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [ByteGradAlgorithm]
