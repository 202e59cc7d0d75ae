"""CPU stand-in for ``sgl_kernel`` (declared in the manifest's ``[verify.env.stubs]``).

sgl_kernel is SGLang's CUDA-only extension. ``managers.scheduler`` (and through it
``speculative.dflash_worker``) reach it at module level via the disaggregation and host-memory
modules, so without a stand-in those modules cannot be imported on a CPU machine at all. This
package lets the imports gate and the set's integration tests import them: every attribute of
``sgl_kernel`` and of any ``sgl_kernel.<submodule>`` is a placeholder that raises when it is
called, so a CPU test can never silently "run" a kernel.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+cpu-stub"


class _Unavailable:
    """Placeholder for any sgl_kernel symbol: importable, never callable."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a CUDA kernel; the CPU stub of sgl_kernel cannot run it")

    def __getitem__(self, key):
        return _Unavailable(f"{self._name}[{key!r}]")


class _StubModule(types.ModuleType):
    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self.__name__}.{attr}")


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``sgl_kernel.<anything>`` to a placeholder module."""

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _SubmoduleFinder())


def __getattr__(attr: str):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _Unavailable(f"{__name__}.{attr}")
