"""The lifecycle: what an algorithm is and what the core does with it while training.

``tensor`` (the tensor proxies), ``bucket`` and ``bucket_ops/`` (buckets and the generic blocks an algorithm's ops
use), ``algorithm`` (``Algorithm``/``AlgorithmImpl``: the hooks the core calls, in order), ``feature`` (the
``Feature`` contract), ``capabilities`` (what an algorithm declares), ``scheduler`` (launches a module's buckets in
order), ``state`` and ``module_state`` (what bagua keeps on a user's object), ``rounds``, ``hook_time``, ``warmup``.
Imports the runtime, the plugin registries and the codec contract; never selection or the wrapped module.
"""
