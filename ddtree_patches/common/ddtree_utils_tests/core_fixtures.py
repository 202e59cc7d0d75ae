"""Fixtures of the DDTree core module's tests (``ddtree_utils``, ``device``, ``cuda``): a pytest plugin
that this package's ``conftest.py`` and a set's own ``tests/conftest.py`` load (``pytest_plugins``).

The module under test is loaded by file path from the patched SGLang tree of the set being tested,
so these tests need torch only, not an installed SGLang. The tree is ``$PATCHKIT_TARGET`` (the
``tests`` gate and ``tests/sets`` set it), else the tree ``patchkit.testing.patched_tree`` builds for
the set ``$PATCHKIT_SET`` names (when unset: the set whose tests pytest was asked to run).

A test module that needs more of the module than every set carries says so with
``pytestmark = pytest.mark.needs("name", ...)``: against a tree whose module lacks a name, its tests
are skipped with the name as the reason (v1's module has no fused Triton round, for one). Capability,
not set names: a set that gains the code runs the tests.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

MODULE_PATH = Path("python/sglang/srt/speculative/ddtree_utils.py")
MODULE_NAME = "ddtree_utils_under_test"
SET_ENV = "PATCHKIT_SET"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device")
    config.addinivalue_line("markers", "needs(*names): the module under test must define these (else skipped)")
    asked = _set_of(config.args)
    if asked is not None:
        os.environ.setdefault(SET_ENV, str(asked))


def _set_of(args: list[str]) -> Path | None:
    """The set folder (the one holding ``manifest.toml``) above the first test path inside a set."""
    for arg in args:
        path = Path(arg.split("::")[0]).resolve()
        for folder in (path, *path.parents):
            if (folder / "manifest.toml").is_file():
                return folder
    return None


def _patched_tree_root() -> Path:
    target = os.environ.get("PATCHKIT_TARGET")
    if target:
        return Path(target)
    set_dir = os.environ.get(SET_ENV)
    if not set_dir:
        pytest.fail(f"set PATCHKIT_TARGET to a patched SGLang tree, or {SET_ENV} to the patch set whose tree "
                    "these tests run against (`patchkit verify --gate tests` and tests/sets set them)", pytrace=False)
    try:
        from patchkit.testing import patched_tree
    except ImportError as error:  # pragma: no cover - depends on the checkout
        pytest.fail(
            "set PATCHKIT_TARGET to a patched SGLang tree (the directory holding "
            f"python/sglang), or install patchkit so patchkit.testing.patched_tree "
            f"can build one ({error})",
            pytrace=False,
        )
    return Path(patched_tree(Path(set_dir)))


@pytest.fixture(scope="session")
def ddtree_utils() -> ModuleType:
    """``sglang.srt.speculative.ddtree_utils`` from the patched tree."""
    path = _patched_tree_root() / MODULE_PATH
    if not path.is_file():
        pytest.fail(f"{path} does not exist: is the set applied?", pytrace=False)
    return _load(path, MODULE_NAME)


def _load(path: Path, name: str) -> ModuleType:
    """A module of the tree by its file, registered as ``name`` (dataclasses resolve string
    annotations through sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def speculative_module(name: str) -> ModuleType:
    """``sglang.srt.speculative.<name>`` of the patched tree, loaded by path like ``ddtree_utils`` (the
    modules loaded so need torch at most). A set whose tree has no such module (an older series) skips
    the test module that asks: a capability, not a set name."""
    path = _patched_tree_root() / MODULE_PATH.parent / f"{name}.py"
    if not path.is_file():
        pytest.skip(f"this tree has no {path.name}", allow_module_level=True)
    return _load(path, f"{name}_under_test")


CUDA_SKIP = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA is not available on this machine"
)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, CUDA_SKIP])])
def device(request: pytest.FixtureRequest) -> torch.device:
    """Every device the module must run on: CPU always, CUDA when present."""
    return torch.device(request.param)


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    """The CUDA device, for tests that compare GPU results with CPU results."""
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available on this machine")
    return torch.device("cuda")


@pytest.fixture(scope="session", autouse=True)
def single_torch_thread():
    """Run torch single-threaded: these tests issue many tiny ops, where handing
    work to a thread pool on a small shared CI machine costs far more than it saves."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def module_carries_what_the_test_needs(request: pytest.FixtureRequest) -> None:
    """Skip a test marked ``needs(...)`` when the tree's module lacks one of the names."""
    marker = request.node.get_closest_marker("needs")
    if marker is None:
        return
    module = request.getfixturevalue("ddtree_utils")
    missing = [name for name in marker.args if not hasattr(module, name)]
    if missing:
        pytest.skip(f"this tree's ddtree_utils has no {', '.join(missing)}: a capability this set does not carry")
