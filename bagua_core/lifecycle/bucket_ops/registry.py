"""Bucket operations provided by plugins: how ``BaguaBucket.append_*_op`` finds an algorithm's op.

The original's documented methods (``append_decentralized_synchronous_op``,
``append_low_precision_decentralized_synchronous_op``, ``append_asynchronous_model_average_op``, and
``append_centralized_synchronous_op`` with a codec) keep their signatures, but the core implements none
of them: each looks up the class registered under its own method name through the hook
``bagua_register_bucket_ops`` and calls ``cls.append_to(bucket, **arguments)`` with the method's
arguments. So the core names no algorithm, and a third party may provide (or replace, by disabling the
built-in plugin) any of these operations exactly as the built-in algorithms do.

A provider is any class with

- ``name``: the kind it provides, the name of the ``BaguaBucket`` method (e.g.
  ``"append_decentralized_synchronous_op"``); unique across the installed plugins;
- ``append_to(bucket, **arguments)`` (a classmethod): append what the operation runs to ``bucket``
  (``bucket.append_op(op)``) and return what the method documents (the op, an averager, the bucket).

Example::

    class MyOp:
        name = "append_decentralized_synchronous_op"

        @classmethod
        def append_to(cls, bucket, peer_weight, hierarchical=True, peer_selection_mode="all", group=None):
            op = cls(...)
            bucket.append_op(op)
            return op

    @hookimpl
    def bagua_register_bucket_ops():
        return [MyOp]
"""

from __future__ import annotations

from typing import Any

from bagua_core.runtime.exceptions import UnknownNameError
from bagua_core.plugins import bucket_op_registry, get_plugin_manager

__all__ = ["append_provided_op"]


def append_provided_op(bucket: Any, kind: str, **arguments: Any) -> Any:
    """Append the operation of ``kind`` (a ``BaguaBucket`` method's name) from the plugin that provides
    it; returns what its ``append_to`` returns. ``UnknownNameError`` names the kind and the installed
    plugins when none provides it."""
    providers = bucket_op_registry.providers()
    if kind not in providers:
        plugins = sorted(name for name, _ in get_plugin_manager().list_name_plugin() if name)
        provided = ", ".join(sorted(providers)) or "none"
        raise UnknownNameError(
            f"BaguaBucket.{kind}: no installed plugin provides this bucket operation (hook "
            f"bagua_register_bucket_ops; provided: {provided}); installed plugins: {', '.join(plugins) or 'none'}. "
            f"Install the plugin that provides it, or remove it from BAGUA_DISABLE_PLUGINS"
        )
    return providers[kind][0].append_to(bucket, **arguments)
