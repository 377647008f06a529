"""Benchmarks that need a CUDA device: the MinMaxUInt8 kernels and the per-step overhead on one GPU."""
