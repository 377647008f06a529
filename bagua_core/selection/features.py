"""Selecting features: by name, by a mapping of names to options, from a config file's ``[features.<name>]``
tables, or by the feature itself (``Feature.requested``); every name and option validated against the installed
features before the first collective.

A config file holds its features beside its ``[algorithm]``, one ``[features.<name>]`` table each.

Example::

    >>> [f.name for f in resolve_features({"sync_batchnorm": {}}, None, model)]
    ['sync_batchnorm']
    >>> resolve_features(["sync_batchnrom"], None, model)
    Traceback (most recent call last):
    UnknownNameError: unknown feature 'sync_batchnrom' (did you mean 'sync_batchnorm'?); available: ...
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from bagua_core.lifecycle.feature import Feature, FeatureConfig
from bagua_core.plugins import feature_registry
from bagua_core.runtime.exceptions import BaguaConfigError
from bagua_core.selection.config import CONFIG_SUFFIXES, build_feature, features_table, load_config_file

__all__ = ["features_in_file", "resolve_features", "selection_of"]


def selection_of(features: Any, where: str = "") -> list[Feature]:
    """``with_bagua(features=...)`` as feature instances, in the order given: None; a name; a ``Feature``; a
    mapping of names to options (a mapping, a ``FeatureConfig`` or None); a sequence of names, ``Feature`` s and
    ``FeatureConfig`` s."""
    if features is None:
        return []
    if isinstance(features, (str, Feature, FeatureConfig)):
        features = [features]
    if isinstance(features, Mapping):
        return [build_feature(name, options, where) for name, options in features.items()]
    if isinstance(features, Sequence):
        built = []
        for item in features:
            if isinstance(item, Feature):
                built.append(item)
            elif isinstance(item, FeatureConfig):
                built.append(build_feature(item.name, item, where))
            else:
                built.append(build_feature(item, None, where))
        return built
    raise BaguaConfigError(f"features must be a mapping of feature names to options, or a list of names, got "
                           f"{type(features).__name__}")


def features_in_file(algorithm: Any) -> list[Feature]:
    """The features of the config file an algorithm argument names (``with_bagua``'s: a path, or None with
    ``BAGUA_CONFIG_FILE`` set); none for any other form."""
    if algorithm is None:
        algorithm = os.environ.get("BAGUA_CONFIG_FILE") or None
    if isinstance(algorithm, os.PathLike) or (isinstance(algorithm, str) and algorithm.endswith(CONFIG_SUFFIXES)):
        return features_table(load_config_file(algorithm), str(algorithm))
    return []


def _merged(selected: list[Feature]) -> dict[str, Feature]:
    """Selected features by name, in the order first named; a name selected again replaces the options given
    before it (the file's, then ``features=``'s)."""
    chosen: dict[str, Feature] = {}
    for feature in selected:
        chosen[feature.name] = feature
    return chosen


def resolve_features(features: Any, algorithm: Any, module: torch.nn.Module, running: Sequence[Feature] = (),
                     carried: Sequence[Feature] = ()) -> list[Feature]:
    """The features a wrap of ``module`` runs with, in the order their hooks are called: the process's
    (``running``: started by ``init_process_group``), those the wrap before ran (``carried``: a re-wrap), unless
    selected again, then those selected (the config file's, then ``features=``), then those that turn themselves
    on (``Feature.requested``, by name). A process feature selected by a wrap must already run (with the same
    options, if any are given)."""
    by_name = {feature.name: feature for feature in running}
    selected = _merged(features_in_file(algorithm) + selection_of(features))
    for feature in carried:
        if feature.name not in selected:
            by_name.setdefault(feature.name, feature)
    for name, feature in selected.items():
        if feature.scope == "process":
            started = by_name.get(name)
            given = {k for k in feature.config.model_fields_set if k != "name"}
            if started is None:
                raise BaguaConfigError(
                    f"feature {name!r} runs for a whole process: it is turned on when the process starts "
                    f"(init_process_group({feature.init_argument or '...'}=...), or its environment), not by a wrap")
            if given and started.canonical_options() != feature.canonical_options():
                raise BaguaConfigError(f"feature {name!r} runs in this process with {started.canonical_options()}; "
                                       f"a wrap cannot change it to {feature.canonical_options()}")
            continue
        by_name.setdefault(name, feature)
    for name in feature_registry.names():
        if name in by_name:
            continue
        cls = feature_registry.get(name)
        if cls.scope != "module":
            continue
        options = cls.requested(module)
        if options is not None:
            by_name[name] = build_feature(name, options)
    return list(by_name.values())
