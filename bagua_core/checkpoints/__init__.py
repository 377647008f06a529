"""Checkpoints: saving and loading training state and resuming exactly.

``checkpoint`` (the original's ``save_checkpoint``/``load_checkpoint``), ``files`` (file names, the
tracker, atomic writes) and ``resume`` (what a wrapped module saves and restores of its algorithm).
Imports the runtime and the lifecycle (the module's state); the wrapped module (``bagua_core.module``)
uses it.
"""
