"""What a step's transaction keeps and what a joiner takes from a live peer.

:func:`capture` copies (tensors cloned once each: the copy must not move while the model trains on) the parts an
algorithm declares in ``Capabilities.fault_tolerance.heals``: ``weights`` (the module's state dict),
``optimizer`` (every optimizer's state dict), ``algorithm_state`` (the impl's ``state_dict``, and with it every
feature's, ``Feature.state_dict``) and ``step`` (the module's step counter). :func:`restore` puts them back. :func:`fingerprint` is what a
joiner must share with the quorum (algorithm, options, model) and :func:`check_joiner` compares it,
naming the first field that differs.

A model sharded with FSDP2 inside the replica (``DTensor`` parameters and optimizer state) is captured as
its local shards, plain tensors: a heal moves this rank's shards only, to the same rank of the joiner (which
holds the same shards), and :func:`restore` copies them back into the weights' shards and wraps the
optimizer's state as the parameters' ``DTensor`` tensors again.

Example::

    >>> saved = capture(module, ("weights", "optimizer", "algorithm_state", "step"))
    >>> restore(module, saved)        # the module is back where it was
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from bagua_core.api import WrappedModule
from bagua_core.lifecycle.module_state import named_buffers, named_parameters, state_of
from bagua_core.lifecycle.tensor import is_sharded, load_optimizer_state, local_shard
from bagua_core.runtime.exceptions import BaguaConfigError

__all__ = ["capture", "restore", "fingerprint", "check_joiner", "copy_tree", "tree_bytes"]


def copy_tree(value: Any, memo: dict | None = None) -> Any:
    """``value`` with every tensor cloned (dicts, lists and tuples copied, other leaves shared). Tensors that
    are the same view of the same memory (a parameter in the module's state dict and in an algorithm's state,
    an optimizer's state reached twice) are cloned once per ``memo`` and shared in the copy."""
    memo = {} if memo is None else memo
    if isinstance(value, torch.Tensor):
        value = local_shard(value)  # a DTensor: this rank's shard (see the module doc)
        key = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), value.stride(),
               value.dtype, value.device)
        if key not in memo or key[0] == 0:  # (empty storages all share address 0)
            # the source is kept too: while it lives, no other tensor of this copy can take its address
            memo[key] = (value, value.detach().clone())
        return memo[key][1]
    if isinstance(value, dict):
        return {k: copy_tree(v, memo) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_tree(v, memo) for v in value]
    if isinstance(value, tuple):
        return tuple(copy_tree(v, memo) for v in value)
    return value


def tree_bytes(value: Any) -> int:
    """Bytes of the tensors in ``value`` (dicts, lists and tuples walked): what a heal moves, roughly."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tree_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tree_bytes(v) for v in value)
    return 0


def capture(module: torch.nn.Module, parts: Iterable[str], per_replica: Iterable[str] = ()) -> dict[str, Any]:
    """A copy of ``parts`` of ``module``'s training state (module doc); ``per_replica``: keys of the algorithm's
    state left out (``FaultTolerance.per_replica_state``: what a joiner healed with the copy does not take)."""
    parts, per_replica = set(parts), set(per_replica)
    saved: dict[str, Any] = {}
    memo: dict = {}  # what the algorithm's state holds of the weights and optimizers is copied once
    if "weights" in parts:
        saved["weights"] = copy_tree(module.state_dict(keep_vars=is_sharded(module)), memo)
    if "optimizer" in parts:
        saved["optimizer"] = [copy_tree(opt.state_dict(), memo) for opt in state_of(module).optimizers]
    if "algorithm_state" in parts:
        state = state_of(module).impl.state_dict()
        saved["algorithm_state"] = copy_tree({k: v for k, v in state.items() if k not in per_replica}, memo)
        saved["feature_state"] = copy_tree(WrappedModule(module).features_state_dict(), memo)
    if "step" in parts:
        saved["step"] = int(state_of(module).train_step_counter)
    return saved


def restore(module: torch.nn.Module, saved: dict[str, Any], algorithm: bool = True) -> None:
    """Put back what :func:`capture` took (``algorithm=False``: all but the impl's state, which the caller
    loads once the impl is rebuilt on the new quorum)."""
    if "step" in saved:  # first: an impl's state may be relative to the step counter
        state_of(module).train_step_counter = int(saved["step"])
    sharded = is_sharded(module)
    if "weights" in saved:
        with torch.no_grad():
            if sharded:  # into each weight's shard, in place (FSDP2 owns the storage)
                live = module.state_dict(keep_vars=True)
                if set(live) != set(saved["weights"]):
                    raise BaguaConfigError(f"restoring a sharded model: the saved weights name "
                                           f"{sorted(set(saved['weights']) ^ set(live))[:3]} differently")
                for name, tensor in live.items():
                    local_shard(tensor).copy_(saved["weights"][name])
            else:
                module.load_state_dict(copy_tree(saved["weights"]))
    if "optimizer" in saved:
        for opt, state in zip(state_of(module).optimizers, saved["optimizer"]):
            load_optimizer_state(opt, copy_tree(state))
    if "feature_state" in saved:
        WrappedModule(module).load_features_state_dict(copy_tree(saved["feature_state"]))
    if algorithm and "algorithm_state" in saved:
        state_of(module).impl.load_state_dict(copy_tree(saved["algorithm_state"]))


def fingerprint(module: torch.nn.Module) -> dict[str, Any]:
    """What every replica of a quorum must share: the algorithm's name and options, the model's tensors
    (names, shapes, dtypes) and the optimizers' kinds and hyperparameters."""
    declaration = state_of(module).declaration
    tensors = named_parameters(module) + named_buffers(module)
    optimizers = [
        {"kind": type(opt).__name__,
         "hyperparameters": [{k: v for k, v in group.items() if k != "params" and isinstance(v, (int, float, str, bool))}
                             for group in opt.param_groups]}
        for opt in state_of(module).optimizers
    ]
    shard = state_of(module).shard
    return {
        "algorithm": declaration.name,
        "options": declaration.canonical_options(),
        "model": {name: {"shape": list(t.shape), "dtype": str(t.dtype)} for name, t in tensors},
        "optimizers": optimizers,
        "shards_per_replica": shard.count if shard is not None else 1,
    }


def _first_difference(mine: Any, theirs: Any, path: tuple = ()) -> tuple | None:
    """The path (keys and indices) of the first place where the two trees differ; a list of plain values
    (a shape) counts as one value."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in list(mine) + [k for k in theirs if k not in mine]:
            if key not in mine or key not in theirs:
                return (*path, key)
            found = _first_difference(mine[key], theirs[key], (*path, key))
            if found is not None:
                return found
        return None
    nested = isinstance(mine, list) and any(isinstance(v, (dict, list)) for v in mine)
    if nested and isinstance(theirs, list) and len(mine) == len(theirs):
        for i, (a, b) in enumerate(zip(mine, theirs)):
            found = _first_difference(a, b, (*path, i))
            if found is not None:
                return found
        return None
    return None if mine == theirs else path


def _at(tree: Any, path: tuple) -> Any:
    value = tree
    for part in path:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return "(absent)"
    return value


def _name(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(path))


def check_joiner(mine: dict[str, Any], quorum: dict[str, Any]) -> None:
    """Raise ``BaguaConfigError`` naming the first field where this joiner's fingerprint differs from the
    quorum's (the replica it heals from); the quorum goes on without it."""
    path = _first_difference(mine, quorum)
    if path is None:
        return
    field = _name(path)
    raise BaguaConfigError(
        f"fault-tolerant mode: this replica is refused by the quorum: {field} differs: quorum "
        f"{_at(quorum, path)!r}, this replica {_at(mine, path)!r}; start it with the same algorithm, options and "
        f"model as the running replicas"
    )
