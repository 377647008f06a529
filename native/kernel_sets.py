"""The kernels the build compiles, as their owners list them: every ``kernels.toml`` under the packages that may
own kernels (a codec's, an algorithm's). This folder holds only the shared part (``bagua_native.h``,
``parallel.c``, ``bagua_cuda.cu``, the NCCL API); it names no owner's kernel.

A ``kernels.toml`` lists, relative to its own folder:

``cpu_headers``      the headers of the C functions Python calls (parsed into cffi's cdef)
``cpu_sources``      the C sources
``cuda_headers``     the headers of the CUDA entry points (the ABI-mode ffi of the CUDA library)
``cuda_sources``     the CUDA sources
``internal_headers`` headers the sources include but Python does not call (rebuild when they change)
``uses``             packages (repository paths of their top level: ``"bagua_codecs"``, ``"bagua_algorithms/<name>"``)
                     whose public headers these sources include: the headers in that package's ``include/``
                     folder (its own package's too). Another package's other folders are its own: a source
                     includes nothing from them.

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

__all__ = ["KernelSet", "OWNER_PACKAGES", "PUBLIC_INCLUDE", "REPO_ROOT", "find_kernel_sets", "public_include_dir"]

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
    """Its own folder and the ``include/`` folder of each package it ``uses``."""
    public_headers: tuple[str, ...] = ()
    """The headers in those ``include/`` folders (rebuild when they change)."""


PUBLIC_INCLUDE = "include"
"""A package's public headers: ``<package>/include/`` (``bagua_codecs.include_dir()`` returns its own)."""


def public_include_dir(package: str, root: str = REPO_ROOT) -> str:
    """The public include folder of ``package`` (a ``uses`` entry); raises when it names no package's top
    level or the package has no ``include/`` folder."""
    parts = package.strip("/").split("/")
    is_top_level = len(parts) == {"bagua_codecs": 1, "bagua_algorithms": 2}.get(parts[0])
    folder = os.path.join(root, *parts, PUBLIC_INCLUDE)
    if not is_top_level or not os.path.isdir(folder):
        raise ValueError(f"uses = [{package!r}]: a kernels.toml uses a package by its top level (bagua_codecs, "
                         f"bagua_algorithms/<name>) and includes the headers in its {PUBLIC_INCLUDE}/ folder; "
                         f"{os.path.relpath(folder, root)} is not one")
    return folder


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
    try:
        used = tuple(public_include_dir(package) for package in listed.get("uses", ()))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    public = tuple(sorted(os.path.join(folder, name) for folder in used for name in os.listdir(folder)
                          if name.endswith((".h", ".cuh", ".hpp"))))
    return KernelSet(os.path.relpath(directory, REPO_ROOT), directory, include_dirs=(directory, *used),
                     public_headers=public, **files)


def find_kernel_sets(root: str = REPO_ROOT) -> list[KernelSet]:
    """Every ``kernels.toml`` under :data:`OWNER_PACKAGES` of ``root``, in path order."""
    found = []
    for package in OWNER_PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and d != "build")
            if "kernels.toml" in files:
                found.append(os.path.join(folder, "kernels.toml"))
    return [_load(path) for path in sorted(found)]
