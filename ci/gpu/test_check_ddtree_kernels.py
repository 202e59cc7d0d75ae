"""ci/gpu/check_ddtree_kernels.py on a machine without a GPU: how it finds the module, the errors it
gives, the pytest plugin it falls back on, how it reads the benchmark's verdicts, and that without
CUDA it fails instead of reporting checks or timings it did not make."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

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


def test_a_set_where_several_patches_touch_the_module_is_refused(tmp_path):
    checker = load_checker()
    body = f"diff --git a/{MODULE} b/{MODULE}\n--- /dev/null\n+++ b/{MODULE}\n@@ -0,0 +1 @@\n+X = 1\n"
    for name in ("0001-a.patch", "0002-b.patch"):
        (tmp_path / name).write_text(body)
    (tmp_path / "series").write_text("0001-a.patch\n0002-b.patch\n")
    with pytest.raises(checker.CheckError, match="2 patches touch"):
        checker.extract_module(tmp_path, tmp_path / "tree")


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
