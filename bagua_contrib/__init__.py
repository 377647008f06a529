"""Contributed features built on bagua_core: cached datasets, samplers, fused optimizer, SyncBatchNorm, MoE."""
