"""What ``with_bagua`` compares across ranks before its first collective.

Everything that decides which collectives a rank issues, or what their results mean: the algorithm's
name and canonical options (:meth:`~bagua_core.lifecycle.algorithm.Algorithm.canonical_options`, whatever the
plugin), ``do_flatten``, the bucket size, the communicator and process-group backend, the non-finite
policy, the group's membership, the optimizers' types, and the features with their options and what each asks
to agree on (:func:`feature_settings`). The model's tensors are compared beside them (``model_signature``). The native
kernel policy (``BAGUA_NATIVE``) is not compared: both backends give the same bytes.

Example::

    >>> fields, info = wrap_settings(declaration, group, do_flatten=True, optimizers=[opt], source="a.toml")
    >>> fields["algorithm option 'average'"]
    True
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from bagua_core.runtime import env
from bagua_core.lifecycle.algorithm import Algorithm

__all__ = ["algorithm_source", "feature_settings", "wrap_settings"]


def algorithm_source(algorithm: Any) -> str:
    """Where the algorithm given to ``with_bagua`` came from, for the message of a difference."""
    if algorithm is None:
        path = os.environ.get("BAGUA_CONFIG_FILE")
        return f"BAGUA_CONFIG_FILE={path}" if path else "the default"
    if isinstance(algorithm, (str, os.PathLike)):
        return str(algorithm)
    return type(algorithm).__name__


def wrap_settings(declaration: Algorithm, group: Any, do_flatten: bool, optimizers: Sequence[torch.optim.Optimizer],
                  source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(fields, info)`` of this rank: the fields are compared, ``info`` is shown with a difference.
    Reading the environment may raise (a malformed variable): call it inside the agreement."""
    comm = group.get_global_communicator()
    fields: dict[str, Any] = {
        "entry point": "with_bagua",
        "algorithm": declaration.name,
    }
    fields.update({f"algorithm option {key!r}": value for key, value in declaration.canonical_options().items()})
    fields.update({
        "do_flatten": bool(do_flatten),
        "bucket size (BAGUA_DEFAULT_BUCKET_SIZE)": env.get_default_bucket_size(),
        "communicator (BAGUA_COMMUNICATOR)": env.get_communicator_backend(),
        "process group backend": comm.backend,
        "non-finite policy (BAGUA_NONFINITE)": env.get_nonfinite_policy(),
    })
    fields.update({
        "group ranks": list(group.ranks),
        "group nodes": [list(node) for node in group.node_ranks],
        "optimizers": ", ".join(f"{type(o).__module__}.{type(o).__qualname__}" for o in optimizers) or None,
    })
    return fields, {"algorithm from": source}


def feature_settings(module: torch.nn.Module, features: Sequence[Any]) -> dict[str, Any]:
    """The fields of the features a wrap runs with (``bagua_core.lifecycle.feature``): their names in order, each
    one's options and what it asks to agree on besides (``Feature.agreed_fields``)."""
    fields: dict[str, Any] = {"features": [feature.name for feature in features]}
    for feature in features:
        fields.update({f"feature {feature.name!r} option {key!r}": value
                       for key, value in feature.canonical_options().items()})
        fields.update({f"feature {feature.name!r}: {key}": value
                       for key, value in feature.agreed_fields(module).items()})
    return fields
