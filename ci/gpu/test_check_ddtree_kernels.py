"""ci/gpu/check_ddtree_kernels.py on a machine without a GPU: how it finds the module, the errors it
gives, the pytest plugin it falls back on, how it reads the benchmark's verdicts, and that without
CUDA it fails instead of reporting checks or timings it did not make."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from patchkit import manifest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "ci" / "gpu" / "check_ddtree_kernels.py"
WRAPPER = REPO_ROOT / "ci" / "gpu" / "check_ddtree_kernels.sh"
MODULE = "python/sglang/srt/speculative/ddtree_utils.py"


def load_checker():
    spec = importlib.util.spec_from_file_location("check_ddtree_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_tree(root: Path, text: str = "VALUE = 42\n") -> Path:
    path = root / MODULE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return root


def run(*args: str, env: dict | None = None, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HOME": str(tmp_path), **(env or {})})


def test_the_module_is_extracted_from_the_patch_that_adds_it(tmp_path):
    checker = load_checker()
    extracted = checker.extract_module(REPO_ROOT / "ddtree_patches" / "v1", tmp_path)
    assert extracted == tmp_path / MODULE
    names = {node.name for node in ast.parse(extracted.read_text()).body if isinstance(node, ast.FunctionDef)}
    assert {"build_ddtree_tree_from_topk", "ddtree_follow_verified", "ddtree_local_topk"} <= names


@pytest.mark.parametrize("set_name", ["v1", "v2"])
def test_the_extracted_module_is_the_one_the_series_leaves(tmp_path, set_name):
    """v2 adds the module in 0001 and changes it in 0002: the result is the lock's post-image."""
    checker = load_checker()
    set_dir = REPO_ROOT / "ddtree_patches" / set_name
    extracted = checker.extract_module(set_dir, tmp_path)
    lock = manifest.load(set_dir).lock
    assert lock is not None
    assert hashlib.sha256(extracted.read_bytes()).hexdigest() == lock.post_image[MODULE]


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def _series_of_commits(tmp_path: Path, versions: list[str]) -> tuple[Path, list[Path]]:
    """A set whose patches are real ``git format-patch`` output: the module at each version, and in
    every patch an unrelated file too."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "README").write_text("base\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    module = repo / MODULE
    module.parent.mkdir(parents=True)
    for number, text in enumerate(versions, 1):
        module.write_text(text)
        (repo / "README").write_text(f"base {number}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"version {number}")
    set_dir = tmp_path / "set"
    names = _git(repo, "format-patch", "--no-signature", "-o", str(set_dir), "HEAD~" + str(len(versions)))
    patches = [Path(name) for name in names.split()]
    (set_dir / "series").write_text("".join(f"{p.name}\n" for p in patches))
    return set_dir, patches


def test_later_patches_that_change_the_module_are_applied_in_series_order(tmp_path):
    checker = load_checker()
    first = "".join(f"line {i}\n" for i in range(1, 40))
    second = first.replace("line 3\n", "line 3\nnew after 3\n").replace("line 30\n", "")
    third = "head\n" + second.replace("line 39\n", "line 39, last")  # and no newline at the end
    set_dir, patches = _series_of_commits(tmp_path, [first, second, third])
    assert "\\ No newline at end of file" in patches[2].read_text()
    extracted = checker.extract_module(set_dir, tmp_path / "tree")
    assert extracted.read_text() == third


def test_a_hunk_that_does_not_match_the_module_is_a_one_line_error(tmp_path):
    checker = load_checker()
    first = "".join(f"line {i}\n" for i in range(1, 20))
    set_dir, patches = _series_of_commits(tmp_path, [first, first.replace("line 10\n", "ten\n")])
    lines = patches[1].read_text().splitlines(keepends=True)
    number = lines.index(" line 9\n") + 1
    lines[number - 1] = " line nine\n"
    patches[1].write_text("".join(lines))
    with pytest.raises(checker.CheckError) as error:
        checker.extract_module(set_dir, tmp_path / "tree")
    assert str(error.value) == (f"{patches[1].name}:{number}: does not match line 9 of {MODULE} as the earlier "
                                "patches leave it; pass --tree DIR")


def test_a_patch_that_changes_the_module_before_it_is_added_is_refused(tmp_path):
    checker = load_checker()
    set_dir, patches = _series_of_commits(tmp_path, ["a\n", "b\n"])
    (set_dir / "series").write_text(f"{patches[1].name}\n")
    with pytest.raises(checker.CheckError, match="changes it before any patch adds it"):
        checker.extract_module(set_dir, tmp_path / "tree")
    (set_dir / "series").write_text(f"{patches[0].name}\n{patches[0].name}\n")
    with pytest.raises(checker.CheckError, match="adds it again"):
        checker.extract_module(set_dir, tmp_path / "tree")


def test_a_missing_module_is_a_one_line_error(tmp_path):
    done = run("--tree", str(tmp_path), tmp_path=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / MODULE} does not exist: pass --tree DIR (or PATCHKIT_TARGET) holding {MODULE}"
    ]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the checks would run")
def test_without_cuda_nothing_is_reported_as_checked(tmp_path):
    tree = fake_tree(tmp_path / "tree")
    out = tmp_path / "out"
    done = run("--no-tests", env={"OUT": str(out), "PATCHKIT_TARGET": str(tree)}, tmp_path=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no CUDA device: preflight, CUDA tests and timings skipped" in done.stdout
    assert f"module under test: {tree / MODULE}" in done.stdout
    assert "module_sha256: " in done.stdout
    log = (out / "check.log").read_text()
    assert "no CUDA device" in log and not (out / "summary.json").exists()


def test_the_wrapper_runs_the_script_with_python(tmp_path):
    done = subprocess.run(["bash", str(WRAPPER), "--tree", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 2 and "does not exist" in done.stderr


def test_pytest_gets_the_fallback_fixtures_only_without_a_set_conftest(tmp_path):
    checker = load_checker()
    tests = tmp_path / "set" / "tests"
    tests.mkdir(parents=True)
    command, note = checker.test_command(tmp_path / "set", 1, tmp_path)
    assert command[-2:] == ["-p", "ddtree_fixtures"] and "conftest.py missing" in note
    (tests / "conftest.py").write_text("")
    command, note = checker.test_command(tmp_path / "set", 1, tmp_path)
    assert "ddtree_fixtures" not in command and note == ""


def test_the_fallback_fixtures_load_the_module_from_patchkit_target(tmp_path):
    tree = fake_tree(tmp_path / "tree")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_probe.py").write_text(textwrap.dedent("""
        def test_probe(ddtree_utils, device):
            assert ddtree_utils.VALUE == 42 and device.type in ("cpu", "cuda")
    """))
    env = {**os.environ, "PATCHKIT_TARGET": str(tree), "PYTHONPATH": str(REPO_ROOT / "ci" / "gpu")}
    done = subprocess.run([sys.executable, "-m", "pytest", str(tests), "-q", "-p", "ddtree_fixtures",
                           "-p", "no:cacheprovider"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_benchmark_verdicts_are_read_from_its_json(tmp_path):
    checker = load_checker()
    good = {"bs": 1, "budget": 16, "equals_torch_path": [], "equals_reference": [], "graph_equals_eager": [],
            "host_sync": "none", "capture_error": None}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps([good]))
    assert checker.bench_summary(path) == (True, [])
    bad = dict(good, budget=64, equals_torch_path=["mask"], host_sync="SYNC: cudaMemcpy")
    path.write_text(json.dumps([good, bad]))
    ok, problems = checker.bench_summary(path)
    assert not ok and problems == ["bs=1 B=64: equals_torch_path ['mask']",
                                   "bs=1 B=64: host sync SYNC: cudaMemcpy / capture None"]
    assert checker.bench_summary(tmp_path / "missing.json") == (False, ["benchmark wrote no JSON"])


def test_the_tests_step_runs_the_shared_core_tests_with_the_sets_own(tmp_path):
    """The core module's tests left the sets' folders: the GPU step must still run them, as the manifest says."""
    checker = load_checker()
    set_dir = REPO_ROOT / "ddtree_patches" / "v2"
    command, _ = checker.test_command(set_dir, 1, tmp_path)
    assert command[3:5] == [str(set_dir / "tests"), str(REPO_ROOT / "ddtree_patches" / "common" / "ddtree_utils_tests")]
    assert command[5] == "-q"  # the shared DDTreeWorkerV2 tests are integration tests: left out on the GPU host
