"""The set's patched ``sglang`` on the import path, for the tests that import it (``<set>/tests/
integration/conftest.py`` and ``common/ddtree_worker_v2_tests/conftest.py`` call :func:`import_tree_sglang`
with the modules their tests import).

Those tests import the tree's own ``sglang`` package, which needs SGLang's CPU import dependencies:
``patchkit verify --gate tests`` runs them in the isolated ``[verify.env]`` environment, with the set's
declared stubs (``[verify.env] stubs_dir``) on the path. Where the dependencies are missing, each test module is
skipped with the import error as its reason.
"""

from __future__ import annotations

import os
import re
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


def _stubs_dir(set_dir: Path) -> Path:
    """The set's ``[verify.env] stubs_dir`` (relative to the set)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    with open(set_dir / "manifest.toml", "rb") as manifest:
        env = tomllib.load(manifest).get("verify", {}).get("env", {})
    return set_dir / env.get("stubs_dir", "verify/stubs")


def tree_release() -> tuple[int, ...]:
    """The release of the tree's imported ``sglang`` as numbers, e.g. (0, 5, 23): a test shared by sets
    on several bases reads it where their SGLang differs."""
    from sglang.version import __version__

    return tuple(int(part) for part in re.findall(r"\d+", __version__)[:3])


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


#: What a set's DDTreeWorkerV2 integration tests import: its verify input and its worker.
WORKER_V2_MODULES = ("sglang.srt.speculative.ddtree_info_v2", "sglang.srt.speculative.ddtree_worker_v2")

#: The tree whose sglang this process has imported (its ``python`` folder), and what importing failed with.
_imported: dict[str, str | None] = {}


def _set_under_test(set_dir: Path | None) -> Path:
    if set_dir is not None:
        return set_dir
    named = os.environ.get("PATCHKIT_SET")
    if not named:
        raise pytest.UsageError("set PATCHKIT_SET to the patch set whose tree these tests import (the tests gate "
                                "and tests/sets set it)")
    return Path(named)


def _import_tree(set_dir: Path, modules: tuple[str, ...]) -> str | None:
    """Put the set's stubs, then its tree in front of them, on ``sys.path`` (and ``PYTHONPATH``, for the
    tests' subprocesses) and import ``modules``; the import error, or None. A second folder of tests of
    the same tree imports into the sglang already loaded (two copies of one module would each hold their
    own state)."""
    tree = _tree_python(set_dir)
    if _imported.get("tree") == str(tree) and _imported.get("error") is None:
        try:
            for module in modules:
                __import__(module)
        except Exception as error:  # as in _probe_sglang
            return f"{type(error).__name__}: {error}"
        return None
    # Stubs first, then the tree in front of them: the tree's sglang must win over anything installed.
    _put_on_path(_stubs_dir(set_dir))
    _put_on_path(tree)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (*sys.path[:2], os.environ.get("PYTHONPATH", "")) if p)
    error = _probe_sglang(modules)
    _imported.update(tree=str(tree), error=error)
    return error


def import_tree_sglang(modules: tuple[str, ...], set_dir: Path | None = None) -> Callable[..., pytest.File | None]:
    """The ``pytest_pycollect_makemodule`` hook for a conftest whose test modules import the tree's own
    ``sglang``: before the first module is collected it imports ``modules`` from the tree of ``set_dir``
    (default: ``$PATCHKIT_SET``); then each module is collected normally, or stood in for by one that
    skips with the import error."""
    error: list[str | None] = []

    def pytest_pycollect_makemodule(module_path, parent):
        if not error:
            error.append(_import_tree(_set_under_test(set_dir), modules))
        if error[0] is None:
            return None
        stand_in = _SkippedModule.from_parent(parent, path=module_path)
        stand_in.reason = error[0]
        return stand_in

    return pytest_pycollect_makemodule
