"""Integration tests: they import the patched tree's own ``sglang`` package (DDTreeVerifyInput, the
DDTreeWorkerV2 round, the graph-runner and scheduler sites, ServerArgs), not just ``ddtree_utils``.

That needs SGLang's CPU import dependencies. ``patchkit verify --gate tests`` runs them in the
isolated ``[verify.env]`` environment, with the declared stubs (``verify/stubs``) on the path. In an
environment without those dependencies each module is skipped with the import error as its reason.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

SET_DIR = Path(__file__).resolve().parents[2]


def _tree_python() -> Path:
    target = os.environ.get("PATCHKIT_TARGET")
    if target:
        return Path(target) / "python"
    from patchkit.testing import patched_tree

    return Path(patched_tree(SET_DIR)) / "python"


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


# Stubs first, then the tree in front of them: the tree's sglang must win over anything installed.
_put_on_path(SET_DIR / "verify" / "stubs")
_put_on_path(_tree_python())
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (*sys.path[:2], os.environ.get("PYTHONPATH", "")) if p)



def _probe_sglang() -> str | None:
    """Import the tree's sglang once; the import error, or None when it imports."""
    _forget_sglang()
    try:
        import sglang.srt.speculative.ddtree_info_v2  # noqa: F401
        import sglang.srt.speculative.ddtree_worker_v2  # noqa: F401
    except Exception as error:  # an ImportError, or a KeyError/AttributeError of a half-imported package
        _forget_sglang()
        return f"{type(error).__name__}: {error}"
    return None


_IMPORT_ERROR = _probe_sglang()


class _NotImportable(pytest.Item):
    def runtest(self) -> None:
        pytest.skip(f"the patched tree's sglang cannot be imported here ({_IMPORT_ERROR}); "
                    "`patchkit verify --gate tests` runs these in the [verify.env] environment")


class _SkippedModule(pytest.File):
    """Stands in for a test module that cannot even be imported, so its skip is reported by name
    (a half-failed ``import sglang`` poisons sys.modules for every later module otherwise)."""

    def collect(self):
        yield _NotImportable.from_parent(self, name="requires the sglang CPU environment")


def pytest_pycollect_makemodule(module_path, parent):
    if _IMPORT_ERROR is not None:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None
