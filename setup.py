"""Build glue for the native parts; the project metadata lives in pyproject.toml.

``pip install .`` (or ``pip install -e .``) compiles the CPU kernel library ``bagua_core._native_cpu``
from ``native/`` with cffi (gcc is the only requirement), writes the ABI-mode ffi modules of the CUDA
kernels and of NCCL, and compiles the CUDA kernel library ``bagua_core/_native_cuda.so`` when nvcc is
found (``BAGUA_BUILD_CUDA=0`` skips it; a missing or failing nvcc never fails the install). The
libraries' names say nothing of their kernels: the packages that own the kernels (``bagua_codecs``,
``bagua_algorithms.<name>``) wrap them; ``bagua_core.runtime.native`` only loads them.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "native"))
import build_extras


class BuildExtWithNative(build_ext):
    """build_ext, then the run-time loaded pieces next to the extension."""

    def run(self) -> None:
        super().run()
        if self.inplace:
            package_dir = self.get_finalized_command("build_py").get_package_dir("bagua_core")
        else:
            package_dir = os.path.join(self.build_lib, "bagua_core")
        os.makedirs(package_dir, exist_ok=True)
        build_extras.write_abi_modules(package_dir)
        build_extras.build_cuda_library(package_dir)


setup(
    cffi_modules=["native/build_cpu.py:ffibuilder"],
    cmdclass={"build_ext": BuildExtWithNative},
)
