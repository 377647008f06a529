"""The original's ``GlobalAlgorithmRegistry``: a mapping view of the algorithm registry whose
``register(name, algorithm, description)`` adds an algorithm at run time as an inline plugin.

Example::

    >>> GlobalAlgorithmRegistry.register("my_algorithm", MyAlgorithm, description="...")
    >>> Algorithm.init("my_algorithm", lr=0.1)       # or with_bagua(..., "my_algorithm")
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from bagua_core.plugins import hookimpl
from bagua_core.plugins.manager import get_plugin_manager
from bagua_core.plugins.registry import algorithm_registry

__all__ = ["AlgorithmRegistryView", "GlobalAlgorithmRegistry"]


class _RuntimeAlgorithmPlugin:
    def __init__(self, algorithm: type) -> None:
        self.algorithm = algorithm

    @hookimpl
    def bagua_register_algorithms(self) -> list[type]:
        return [self.algorithm]


class AlgorithmRegistryView(Mapping):
    """``name -> {"algorithm": class, "description": str}`` for every installed algorithm."""

    def __init__(self) -> None:
        self._descriptions: dict[str, str] = {}

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in algorithm_registry:
            raise KeyError(name)
        cls = algorithm_registry.get(name)
        doc = (cls.__doc__ or "").strip().splitlines()
        return {"algorithm": cls, "description": self._descriptions.get(name, doc[0] if doc else "")}

    def __iter__(self) -> Iterator[str]:
        return iter(algorithm_registry.names())

    def __len__(self) -> int:
        return len(algorithm_registry.names())

    def register(self, name: str, algorithm: type, description: str | None = None) -> None:
        """Register ``algorithm`` (a class) under ``name``; a name already present raises ValueError."""
        if not isinstance(name, str):
            raise TypeError(f"`name` must be a str, found {name!r}")
        if name in self:
            raise ValueError(f"'{name}' is already present in the registry.")
        own = getattr(algorithm, "name", "")
        if own and own != name:
            raise ValueError(f"{algorithm.__qualname__}.name is {own!r}; register it under that name")
        algorithm.name = name
        get_plugin_manager().register(_RuntimeAlgorithmPlugin(algorithm), name=f"runtime-algorithm-{name}")
        self._descriptions[name] = description or ""

    def get(self, name: str) -> type:  # type: ignore[override]
        """The class registered under ``name`` (an unknown name lists the available ones)."""
        return algorithm_registry.get(name)

    def available_algorithms(self) -> list[str]:
        return list(self)

    def __str__(self) -> str:
        return "Registered Algorithms: {}".format(", ".join(self))


GlobalAlgorithmRegistry = AlgorithmRegistryView()
