"""The set's patched ``sglang`` on the import path, for a set's integration tests (``<set>/tests/
integration/conftest.py`` calls :func:`import_tree_sglang` with the modules its tests import).

Those tests import the tree's own ``sglang`` package, which needs SGLang's CPU import dependencies:
``patchkit verify --gate tests`` runs them in the isolated ``[verify.env]`` environment, with the set's
declared stubs (``verify/stubs``) on the path. Where the dependencies are missing, each test module is
skipped with the import error as its reason.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def _tree_python(set_dir: Path) -> Path:
    target = os.environ.get("PATCHKIT_TARGET")
    if target:
        return Path(target) / "python"
    from patchkit.testing import patched_tree

    return Path(patched_tree(set_dir)) / "python"


def _put_on_path(path: Path) -> None:
    # In front even when already listed: another set's tree may have been put before it.
    if str(path) in sys.path:
        sys.path.remove(str(path))
    sys.path.insert(0, str(path))


def _forget_sglang() -> None:
    """Drop every imported sglang module, so that another set's tree (its tests collected in the same
    run) or a half-failed import cannot leak into this tree's import."""
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[name]


def _probe_sglang(modules: tuple[str, ...]) -> str | None:
    """Import the tree's sglang modules once; the import error, or None when they import."""
    _forget_sglang()
    try:
        for module in modules:
            __import__(module)
    except Exception as error:  # an ImportError, or a KeyError/AttributeError of a half-imported package
        _forget_sglang()
        return f"{type(error).__name__}: {error}"
    return None


class _NotImportable(pytest.Item):
    reason = ""

    def runtest(self) -> None:
        pytest.skip(f"the patched tree's sglang cannot be imported here ({self.reason}); "
                    "`patchkit verify --gate tests` runs these in the [verify.env] environment")


class _SkippedModule(pytest.File):
    """Stands in for a test module that cannot even be imported, so its skip is reported by name
    (a half-failed ``import sglang`` poisons sys.modules for every later module otherwise)."""

    reason = ""

    def collect(self):
        item = _NotImportable.from_parent(self, name="requires the sglang CPU environment")
        item.reason = self.reason
        yield item


def import_tree_sglang(set_dir: Path, modules: tuple[str, ...]) -> Callable[..., pytest.File | None]:
    """Put the set's stubs, then its tree in front of them, on ``sys.path`` (and ``PYTHONPATH``, for the
    tests' subprocesses), import ``modules`` once, and return the ``pytest_pycollect_makemodule`` hook
    for the conftest: a module stand-in that skips with the import error, or None (collect normally)."""
    # Stubs first, then the tree in front of them: the tree's sglang must win over anything installed.
    _put_on_path(set_dir / "verify" / "stubs")
    _put_on_path(_tree_python(set_dir))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (*sys.path[:2], os.environ.get("PYTHONPATH", "")) if p)
    error = _probe_sglang(modules)

    def pytest_pycollect_makemodule(module_path, parent):
        if error is None:
            return None
        stand_in = _SkippedModule.from_parent(parent, path=module_path)
        stand_in.reason = error
        return stand_in

    return pytest_pycollect_makemodule
