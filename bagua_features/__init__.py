"""The features that ship with bagua, each a plugin on the feature contract (``bagua_core.lifecycle.feature``),
registered through its own entry point exactly as a third party's: ``fault_tolerance`` (the process feature
``fault_tolerant``: replicas that fail and heal, on torchft), ``checkpoints`` (save, load, resume exactly),
``metrics`` (what steps and rounds cost, TensorBoard) and ``autotune`` (bucket sizes tuned while training). They
sit above the core, which imports none of them; ``bagua_cli`` sits above them.

Example::

    >>> model = model.with_bagua([optimizer], "bytegrad", features={"metrics": {"log_dir": "runs"}})
"""
