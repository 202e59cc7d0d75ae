"""Each patch set's tests, each set in a pytest process of its own: its own ``ddtree_patches/<set>/tests``
and the shared packages its manifest names (``[verify.tests] shared``: the DDTree core module's tests in
``ddtree_patches/common/ddtree_utils_tests``), the same paths ``patchkit verify --gate tests`` runs.

Each set's tests run against its own patched tree, and its integration tests import that tree's
``sglang``: in one process the first set's modules would shadow the second's. One process per set keeps
them apart, as ``patchkit verify --gate tests`` does. The tests find their tree themselves
(``patchkit.testing.patched_tree`` for ``$PATCHKIT_SET``: ``$PATCHKIT_TARGET``, else a tree built once
under the patchkit home), so this test passes the caller's environment through, not the suite's
per-test home.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.checks.settests import paths_to_run
from patchkit.errors import BadInput
from patchkit.manifest import load

pytestmark = pytest.mark.long  # a minute or more: scheduled first (conftest.py)

REPO = Path(__file__).resolve().parents[2]
SETS = sorted(path.parent for path in (REPO / "ddtree_patches").glob("*/manifest.toml"))


# Read at collection, before the suite-wide autouse fixture points PATCHKIT_HOME at a fresh folder.
CALLER_ENVIRONMENT = dict(os.environ)


def set_tests(set_dir: Path) -> list[Path]:
    return paths_to_run(set_dir, load(set_dir).verify_table("tests"))


@pytest.mark.parametrize("set_dir", SETS, ids=[path.name for path in SETS])
def test_the_sets_own_tests_pass(set_dir: Path) -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, set_tests(set_dir))]
    if "PYTEST_XDIST_WORKER" in os.environ:  # the suite's workers already hold every core: one more
        command += ["-n", "0"]  # set of workers would only add their start-up (torch, collection)
    environment = {**CALLER_ENVIRONMENT, "PATCHKIT_SET": str(set_dir)}
    done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=3000)
    name = set_dir.relative_to(REPO)
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    assert done.returncode == 0, f"{name}: {summary}\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    print(f"{name}: {summary}")


def test_every_set_runs_its_tests_and_the_shared_core_tests() -> None:
    """Every set runs the core module's tests; the sets whose series adds DDTreeWorkerV2 also run its
    shared integration tests (once in common/, read against each set's base)."""
    common = REPO / "ddtree_patches" / "common"
    assert {path.name for path in SETS} >= {"v1", "v2", "v3"}
    for set_dir in SETS:
        worker_v2 = any("ddtree_worker_v2.py" in patch.read_text() for patch in set_dir.glob("*.patch"))
        expected = [set_dir / "tests", common / "ddtree_utils_tests"]
        assert set_tests(set_dir) == expected + ([common / "ddtree_worker_v2_tests"] if worker_v2 else []), set_dir.name


def test_a_shared_package_that_is_not_there_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "manifest.toml").write_text('[verify.tests]\nshared = ["../nowhere"]\n')
    with pytest.raises(BadInput) as caught:
        paths_to_run(tmp_path, {"shared": ["../nowhere"]})
    assert "'../nowhere'" in caught.value.message and caught.value.location.line == 2


#: What may keep an added line off every CPU test, in the words a [verify.tests.unreachable] reason must use:
#: a GPU-only call (CUDA graphs, CUDA events and streams, CUDA device properties, a collective over the TP
#: group, a model runner with its weights loaded), or code that no device runs (TYPE_CHECKING imports, dead
#: code). Not Triton: its kernels and launches run in Triton's interpreter on CPU tensors, in the test process
#: where the coverage trace sees them; not "CUDA tensors only": a branch on ``t.is_cuda`` runs on a CPU
#: tensor that says it is a CUDA tensor (``as_if_cuda`` in the shared tests).
GPU_ONLY = ("CUDA graph", "torch.cuda.Event", "CUDA stream", "record_stream", "torch.cuda.get_device_properties",
            "all_reduce", "all_gather", "broadcast", "loaded model runner", "TYPE_CHECKING", "dead code")


@pytest.mark.parametrize("name", ["v2", "v3"])
def test_the_sets_declare_no_known_gaps_only_code_no_cpu_runs(name: str) -> None:
    """Their added lines a CPU can run are tested: no [verify.tests.untested] declaration is left, every
    [verify.tests.unreachable] one names code (never a line number) and names the GPU-only call that keeps it
    off a CPU (:data:`GPU_ONLY`). That no CPU test runs it after all is the tests gate's to say: a declaration
    whose every statement a set test ran is a warning (tests/verify/gates/test_tests_coverage.py)."""
    table = load(REPO / "ddtree_patches" / name).verify_table("tests")
    assert table.get("untested", {}) == {}
    for spec, reason in table["unreachable"].items():
        assert not spec.partition(":")[2].partition("-")[0].isdigit(), spec
        assert any(word in reason for word in GPU_ONLY), (spec, reason)
