"""Agreement before the first collective: one gather, then the same error on every rank.

Every rank prepares locally (resolves its options, reads its environment, describes its model), then
one ``all_gather_object`` tells each rank whether the others succeeded and what they decided. A
failure anywhere, or a difference in anything that decides which collectives a rank issues or what
their results mean, is raised on every rank before any other communication, naming the field and
each rank's value::

    algorithm option 'average' differs: rank 0 True, rank 1 False

``prepare`` returns a :class:`Prepared` (its result and the fields to compare) or a plain result. Errors raised
here are marked ``bagua_coordinated`` (every rank raises them, so none poisons the group); one raised the same way
on several ranks is one failure, shown by the lowest of them (``bagua_same_failure_as`` on the others), and a rank
that raises because another failed is marked ``bagua_failed_elsewhere`` and ``bagua_failed_kind``. A plugin reaches
these as ``bagua_core.api.agreement``.

Example::

    >>> prepared = lambda: Prepared(options, {"topology": options.topology}, {"from": path})
    >>> options = agree_or_raise(comm, prepared, model_signature(named), what="MyWrapper")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from bagua_core.runtime.torch_groups import rank_in, size_of
from bagua_core.runtime.exceptions import BaguaError, RankMismatchError

__all__ = ["Agreement", "Prepared", "agree_or_raise", "agreement", "describe_differences", "format_values",
           "model_signature"]

T = TypeVar("T")
_MAX_LISTED_RANKS = 8
_MAX_LISTED_FIELDS = 12


@dataclasses.dataclass
class Prepared:
    """What one rank brings to the agreement: its ``result``, the ``fields`` compared across ranks
    (name -> a picklable value compared with ``==``) and ``info`` shown beside a difference but not
    compared (where a value came from: a config file, an environment variable)."""

    result: Any
    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _show(value: Any) -> str:
    if value is None:
        return "(unset)"
    return str(value)


def format_values(values: list[Any]) -> str:
    """``rank 0 True, rank 1 False`` (grouped by value beyond 8 ranks: ``ranks 0-2, 5 True; ...``)."""
    if len(values) <= _MAX_LISTED_RANKS:
        return ", ".join(f"rank {rank} {_show(value)}" for rank, value in enumerate(values))
    groups: dict[str, list[int]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(_show(value), []).append(rank)
    return "; ".join(f"ranks {_ranges(ranks)} {shown}" for shown, ranks in groups.items())


def _ranges(ranks: list[int]) -> str:
    parts: list[str] = []
    start = previous = ranks[0]
    for rank in ranks[1:] + [-1]:
        if rank == previous + 1:
            previous = rank
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = rank
    return ", ".join(parts)


def describe_differences(fields: list[Mapping[str, Any]], infos: list[Mapping[str, Any]]) -> list[str]:
    """One line per field whose value is not the same on every rank (a missing field counts as unset),
    then one line per ``info`` entry whose value differs, in the order of rank 0's fields."""
    names: list[str] = []
    for rank_fields in fields:
        names.extend(name for name in rank_fields if name not in names)
    lines = []
    for name in names:
        values = [rank_fields.get(name) for rank_fields in fields]
        if any(value != values[0] for value in values[1:]):
            lines.append(f"{name} differs: {format_values(values)}")
            if name == "entry point":  # different wrappers: their other fields are not comparable
                break
    if lines:
        info_names: list[str] = []
        for rank_info in infos:
            info_names.extend(name for name in rank_info if name not in info_names)
        for name in info_names:
            values = [rank_info.get(name) for rank_info in infos]
            if any(value != values[0] for value in values[1:]):
                lines.append(f"({name}: {format_values(values)})")
    return lines


def _coordinated(error: BaseException, origin: int | None = None, same_as: int | None = None) -> BaseException:
    error.bagua_coordinated = True  # type: ignore[attr-defined]  # raised on every rank: nobody waits
    if origin is not None:  # raised here because rank ``origin`` of the group failed (its traceback is its own)
        error.bagua_failed_elsewhere = origin  # type: ignore[attr-defined]
    if same_as is not None:  # rank ``same_as`` failed with the same error: one failure, its traceback is there
        error.bagua_same_failure_as = same_as  # type: ignore[attr-defined]
    return error


def _model_difference(rank: int, other_rank: int, mine: Any, theirs: Any) -> str:
    mine = mine if isinstance(mine, list) else [mine]
    theirs = theirs if isinstance(theirs, list) else [theirs]
    diff = next((f"{a} vs {b}" for a, b in zip(mine, theirs) if a != b), f"{len(mine)} vs {len(theirs)} entries")
    return f"the model differs between rank {rank} and rank {other_rank}: {diff}; every rank must wrap the same model"


def agree_or_raise(comm: Any, prepare: Callable[[], Any], signature: object = None, what: str = "with_bagua") -> Any:
    """Run ``prepare()`` on every rank of ``comm`` (a ``BaguaCommunicator``, a torch process group, or
    None for the whole job); raise on every rank if it failed anywhere, if the fields of its
    :class:`Prepared` differ, or if the ``signature`` (the model's tensors) differs. On the rank that
    failed, the original exception is raised; elsewhere a ``BaguaError`` naming that rank. Returns
    the result of ``prepare`` (unwrapped from its :class:`Prepared`)."""
    torch_group = getattr(comm, "torch_group", comm)
    error: BaseException | None = None
    prepared = Prepared(None)
    try:
        outcome = prepare()
        prepared = outcome if isinstance(outcome, Prepared) else Prepared(outcome)
    except Exception as exc:  # reported to every rank below
        error = exc
    status = (None if error is None else f"{type(error).__name__}: {error}", signature, dict(prepared.fields),
              dict(prepared.info))
    gathered: list = [None] * size_of(torch_group)
    dist.all_gather_object(gathered, status, group=torch_group)
    me = rank_in(torch_group)
    if error is not None:
        # the lowest rank that failed with this very error shows it; the others say they failed the same way
        first = next(rank for rank, (message, *_rest) in enumerate(gathered) if message == status[0])
        raise _coordinated(error, same_as=first if first != me else None)
    for rank, (message, *_rest) in enumerate(gathered):
        if message is not None:
            error = _coordinated(BaguaError(f"{what} failed on rank {rank} of the group: {message}"), origin=rank)
            error.bagua_failed_kind = message.split(":", 1)[0]  # type: ignore[attr-defined]
            raise error
    # a disagreement is one failure, raised on every rank: group rank 0 shows it, the others say so in a line
    lowest = 0 if me != 0 else None
    lines = describe_differences([g[2] for g in gathered], [g[3] for g in gathered])
    if lines:
        shown = lines[:_MAX_LISTED_FIELDS] + ([f"... and {len(lines) - _MAX_LISTED_FIELDS} more"]
                                               if len(lines) > _MAX_LISTED_FIELDS else [])
        raise _coordinated(RankMismatchError(
            f"{what}: the ranks disagree on what decides their collectives:\n  " + "\n  ".join(shown)
            + "\nevery rank must be started with the same options, config file and BAGUA_* environment"
        ), same_as=lowest)
    for rank, (_, other, *_rest) in enumerate(gathered):
        if other != signature:
            raise _coordinated(RankMismatchError(_model_difference(me, rank, signature, other)), same_as=lowest)
    return prepared.result


def model_signature(named_tensors: Sequence[tuple[str, torch.Tensor]]) -> list[tuple[str, tuple, str]]:
    """``(name, shape, dtype)`` of every tensor (a sharded parameter's global shape: the same on every rank): the
    ``signature`` of a model that :func:`agree_or_raise` compares."""
    return [(name, tuple(t.shape), str(t.dtype)) for name, t in named_tensors]


class Agreement:
    """Agreement before the first collective, as a plugin uses it (module doc); ``agreement`` is the one instance.

    Example::

        >>> from bagua_core.api import agreement
        >>> def prepare():
        ...     return agreement.Prepared(topology, {"topology": topology.name})
        >>> topology = agreement.agree_or_raise(None, prepare, agreement.model_signature(named), what="MyWrapper")
    """

    Prepared = Prepared
    agree_or_raise = staticmethod(agree_or_raise)
    model_signature = staticmethod(model_signature)


agreement = Agreement()
