"""The lifecycle: what an algorithm is and what the core does with it while training.

``tensor`` (the tensor proxies), ``bucket`` and ``bucket_ops/`` (buckets, and the generic blocks an
algorithm's ops use: the centralized allreduce op, the hierarchical pattern), ``algorithm``
(``Algorithm``/``AlgorithmImpl``: the hooks the core calls, in order), ``hook_parameters`` (the
hooks' documented parameter names), ``capabilities`` (what an algorithm declares, so the core asks
instead of knowing names), ``scheduler`` (launches a module's buckets in order), ``state`` (the one
attribute at which bagua keeps its state on a user's object, and a tensor proxy's ``TensorState``) and
``module_state`` (a wrapped module's ``ModuleState``: here, below the wings that read it), ``rounds`` (what an
algorithm communicating in rounds reports of them).
Imports the runtime, the plugin registries and the codec contract; never selection, checkpoints or
the wrapped module.
"""
