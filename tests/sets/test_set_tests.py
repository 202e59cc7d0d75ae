"""Each patch set's own tests (``ddtree_patches/<set>/tests``), each set in a pytest process of its own.

Two sets carry test modules and helpers of the same names (``test_topk.py``, ``ddtree_reference.py``),
and each set's integration tests import its own patched tree's ``sglang``: in one process the first
set's modules would shadow the second's. One process per set keeps them apart, as
``patchkit verify --gate tests`` does. The set's tests find their tree themselves
(``patchkit.testing.patched_tree``: ``$PATCHKIT_TARGET``, else a tree built once under the patchkit
home), so this test passes the caller's environment through, not the suite's per-test home.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.long  # a minute or more: scheduled first (conftest.py)

REPO = Path(__file__).resolve().parents[2]
SET_TEST_DIRS = sorted(path for path in (REPO / "ddtree_patches").glob("*/tests") if path.is_dir())


# Read at collection, before the suite-wide autouse fixture points PATCHKIT_HOME at a fresh folder.
CALLER_ENVIRONMENT = dict(os.environ)


@pytest.mark.parametrize("tests_dir", SET_TEST_DIRS, ids=[path.parent.name for path in SET_TEST_DIRS])
def test_the_sets_own_tests_pass(tests_dir: Path) -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests_dir)]
    if "PYTEST_XDIST_WORKER" in os.environ:  # the suite's workers already hold every core: one more
        command += ["-n", "0"]  # set of workers would only add their start-up (torch, collection)
    done = subprocess.run(command, cwd=REPO, env=CALLER_ENVIRONMENT, capture_output=True, text=True, timeout=3000)
    name = tests_dir.relative_to(REPO)
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    assert done.returncode == 0, f"{name}: {summary}\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    print(f"{name}: {summary}")


def test_every_set_with_tests_is_run() -> None:
    assert {path.parent.name for path in SET_TEST_DIRS} >= {"v1", "v2", "v3"}
