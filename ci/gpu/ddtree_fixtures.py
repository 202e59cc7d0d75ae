"""pytest plugin with the DDTree set tests' fixtures, for a checkout whose set has no conftest yet.

``ci/gpu/check_ddtree_kernels.py`` loads it (``-p ddtree_fixtures``) only when the set's
``tests/conftest.py`` is missing; a set conftest always wins. The fixtures are the set
conftest's: ``ddtree_utils`` (the module loaded by path from ``$PATCHKIT_TARGET``),
``device`` (cpu, and cuda when present), ``cuda``, single-threaded torch, the ``gpu`` marker.
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device")


@pytest.fixture(scope="session")
def ddtree_utils() -> ModuleType:
    """``sglang.srt.speculative.ddtree_utils`` from ``$PATCHKIT_TARGET``."""
    target = os.environ.get("PATCHKIT_TARGET")
    if not target:
        pytest.fail("set PATCHKIT_TARGET to the directory holding " f"{MODULE_PATH}", pytrace=False)
    path = Path(target) / MODULE_PATH
    if not path.is_file():
        pytest.fail(f"{path} does not exist", pytrace=False)
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module  # dataclasses resolve string annotations here
    spec.loader.exec_module(module)
    return module


CUDA_SKIP = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, CUDA_SKIP])])
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available on this machine")
    return torch.device("cuda")


@pytest.fixture(scope="session", autouse=True)
def single_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
