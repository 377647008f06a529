"""The kernels the build compiles, as their owners list them: every ``kernels.toml`` under the packages that may
own kernels (a codec's, an algorithm's). This folder holds only the shared part (``bagua_native.h``,
``parallel.c``, ``bagua_cuda.cu``, the NCCL API); it names no owner's kernel.

A ``kernels.toml`` lists, relative to its own folder:

``cpu_headers``      the headers of the C functions Python calls (parsed into cffi's cdef)
``cpu_sources``      the C sources
``cuda_headers``     the headers of the CUDA entry points (the ABI-mode ffi of the CUDA library)
``cuda_sources``     the CUDA sources
``internal_headers`` headers the sources include but Python does not call (rebuild when they change)
``uses``             other kernel folders (repository paths) whose headers these sources include

Example::

    >>> [s.name for s in find_kernel_sets()]
    ['bagua_algorithms/low_precision_decentralized/kernels/native', 'bagua_algorithms/q_adam/native', ...]
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["KernelSet", "OWNER_PACKAGES", "REPO_ROOT", "find_kernel_sets"]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OWNER_PACKAGES = ("bagua_codecs", "bagua_algorithms")
"""The packages searched for ``kernels.toml`` (the built-in codecs and algorithms)."""
_FIELDS = ("cpu_headers", "cpu_sources", "cuda_headers", "cuda_sources", "internal_headers", "uses")


@dataclass(frozen=True)
class KernelSet:
    """One owner's kernels: absolute paths, from its ``kernels.toml``."""

    name: str
    """The folder, relative to the repository."""
    directory: str
    cpu_headers: tuple[str, ...] = ()
    cpu_sources: tuple[str, ...] = ()
    cuda_headers: tuple[str, ...] = ()
    cuda_sources: tuple[str, ...] = ()
    internal_headers: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    """Its own folder and those of the sets it ``uses``."""


def _load(path: str) -> KernelSet:
    directory = os.path.dirname(path)
    with open(path, "rb") as f:
        listed = tomllib.load(f)
    unknown = sorted(set(listed) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{path}: unknown keys {unknown}; a kernels.toml lists {', '.join(_FIELDS)}")
    files = {key: tuple(os.path.join(directory, name) for name in listed.get(key, ())) for key in _FIELDS[:-1]}
    missing = [p for paths in files.values() for p in paths if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"{path} lists files that are not there: {missing}")
    used = tuple(os.path.join(REPO_ROOT, folder) for folder in listed.get("uses", ()))
    return KernelSet(os.path.relpath(directory, REPO_ROOT), directory, include_dirs=(directory, *used), **files)


def find_kernel_sets(root: str = REPO_ROOT) -> list[KernelSet]:
    """Every ``kernels.toml`` under :data:`OWNER_PACKAGES` of ``root``, in path order."""
    found = []
    for package in OWNER_PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and d != "build")
            if "kernels.toml" in files:
                found.append(os.path.join(folder, "kernels.toml"))
    return [_load(path) for path in sorted(found)]
