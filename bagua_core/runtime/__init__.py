"""The runtime: this process, its environment and the other ranks. The bottom wing of the core.

``env`` (launcher variables and bagua's tunables; it imports nothing of the core), ``exceptions``,
``process_group`` (groups, node membership, communicators), ``communication/`` (collectives and the
communication thread), ``failure/`` (a failure reaches every rank), ``agreement`` (ranks compare
what decides their collectives) and ``native/`` (the Python side of the C/CUDA kernels and NCCL).
Imports no other wing.
"""
