"""``bytegrad``: gradient allreduce with MinMaxUInt8 compression, every rank bit-identical.

The exchange lives in this package: :mod:`bagua_algorithms.bytegrad.compressed` (the bucket op and the
plain exchange) and :mod:`bagua_algorithms.bytegrad.compressed_pipeline` (its two rounds over the core's
pipelined exchange); the op is registered for ``BaguaBucket.append_centralized_synchronous_op`` with a
codec (hook ``bagua_register_bucket_ops``), which qadam's momentum exchange uses too.

Communicated: each bucket of gradients as uint8 (plus an fp32 min/max per chunk): the bucket is
padded to a multiple of the number of ranks n (repeating its last value) and split into n chunks; each chunk is compressed and sent to its owner (alltoall), which averages (or sums) the
decompressed chunks in fp32, compresses the result again and allgathers it; every rank decompresses
the same bytes. Hierarchical: averaged inside the node (full precision) first, the compressed
exchange runs among the node leaders, and the result is broadcast inside the node.

Example::

    >>> from bagua_algorithms.bytegrad import ByteGradAlgorithm
    >>> model = model.with_bagua([optimizer], ByteGradAlgorithm(hierarchical=False))
    >>> model = model.with_bagua([optimizer], {"name": "bytegrad", "compression": "MinMaxUInt4"})  # 4 bits
"""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from bagua_algorithms.bytegrad.compressed import CompressedAllReduceOp
from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithmImpl

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig
from bagua_core.lifecycle.capabilities import Capabilities, FaultTolerance
from bagua_core.codecs import check_codec_name
from bagua_core.plugins import hookimpl

__all__ = ["ByteGradAlgorithm", "ByteGradAlgorithmImpl", "ByteGradConfig", "CompressedAllReduceOp"]


class ByteGradConfig(AlgorithmConfig):
    name: Literal["bytegrad"] = "bytegrad"
    hierarchical: bool = True
    """Average inside each node first; the compressed exchange then runs among the node leaders."""
    average: bool = True
    """Average the gradients (True) or sum them (False)."""
    compression: str = "MinMaxUInt8"
    """The codec of the exchange (any installed one, ``bagua plugins`` lists them: MinMaxUInt4, fp16,
    bf16, ScaledSign, ...); MinMaxUInt8 runs the native fused kernels."""

    _check_compression = field_validator("compression")(lambda cls, value: check_codec_name(value))


class ByteGradAlgorithmImpl(GradientAllReduceAlgorithmImpl):
    """Gradient allreduce's impl with the compressed centralized op (MinMaxUInt8 by default)."""

    def __init__(self, process_group, hierarchical: bool = True, average: bool = True,
                 compression: str = "MinMaxUInt8") -> None:
        super().__init__(process_group, hierarchical, average)
        self.compression = compression


class ByteGradAlgorithm(Algorithm):
    """Gradient allreduce compressed to 8 bits per value (MinMaxUInt8)."""

    name = "bytegrad"
    Config = ByteGradConfig
    capabilities = Capabilities(communicates="gradients", tunable_bucket_size=True, keeps_optimizer_semantics=True,
                                relative_bytes=0.25,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "step"), commit="before_optimizer_step",
                                    rederives=("chunking by world size", "averaging denominator",
                                               "hierarchy (a replica is a node)")))
    """MinMaxUInt8 (the default codec): a byte per fp32 value plus a min/max per chunk, about a quarter."""

    def __init__(self, hierarchical: bool = True, average: bool = True, compression: str = "MinMaxUInt8") -> None:
        super().__init__(hierarchical=hierarchical, average=average, compression=compression)

    def reify(self, process_group) -> ByteGradAlgorithmImpl:
        c = self.config
        return ByteGradAlgorithmImpl(process_group, c.hierarchical, c.average, c.compression)


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [ByteGradAlgorithm]


@hookimpl
def bagua_register_bucket_ops() -> list[type]:
    return [CompressedAllReduceOp]
