"""Fixtures for the DDTree patch set's own tests.

The module under test is loaded by file path from a patched SGLang tree, so these
tests need torch only, not an installed SGLang.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

SET_DIR = Path(__file__).resolve().parents[1]
MODULE_PATH = Path("python/sglang/srt/speculative/ddtree_utils.py")
MODULE_NAME = "ddtree_utils_under_test"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device")


def _patched_tree_root() -> Path:
    target = os.environ.get("PATCHKIT_TARGET")
    if target:
        return Path(target)
    try:
        from patchkit.testing import patched_tree
    except ImportError as error:  # pragma: no cover - depends on the checkout
        pytest.fail(
            "set PATCHKIT_TARGET to a patched SGLang tree (the directory holding "
            f"python/sglang), or install patchkit so patchkit.testing.patched_tree "
            f"can build one ({error})",
            pytrace=False,
        )
    return Path(patched_tree(SET_DIR))


@pytest.fixture(scope="session")
def ddtree_utils() -> ModuleType:
    """``sglang.srt.speculative.ddtree_utils`` from the patched tree."""
    path = _patched_tree_root() / MODULE_PATH
    if not path.is_file():
        pytest.fail(f"{path} does not exist: is the set applied?", pytrace=False)
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    # Dataclasses resolve string annotations through sys.modules.
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


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
