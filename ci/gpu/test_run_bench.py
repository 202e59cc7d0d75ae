"""The one-command GPU bench driver, run for real on CPU against the stand-in server (``--gpus 0``).

Run with ``python -m pytest ci/gpu -q``. The test models are written for real (torch on CPU); the
stand-in ignores their weights, so this checks the driver: steps, files, summary, exit codes, leftovers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.conftest import make_bench_env, server_pids
from tests.smoke.conftest import alive

pytestmark = pytest.mark.long  # a minute or more: scheduled first (conftest.py)

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_BENCH = REPO_ROOT / "ci" / "gpu" / "run_bench.sh"


def run_bench(tmp: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "HOME": str(tmp / "home"), "PATCHKIT_HOME": str(tmp / "pkhome")}
    env.pop("OUT", None)
    return subprocess.run(["bash", str(RUN_BENCH), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=tmp)


@pytest.mark.parametrize(("args", "message"), [
    (["--steps", "default,fast"], "--steps: unknown step(s) fast; choose from default, tree, sampling, shape"),
    (["--steps", "shape"], "--steps shape needs --shape NAME (e.g. qwen3-8b)"),
    (["--budgets", "16,x"], "'16,x' is not a comma-separated list of integers"),
    (["--concurrency", "0"], "'0': every value must be a positive integer"),
])
def test_bad_options_exit_2_with_one_line(tmp_path, args, message):
    done = run_bench(tmp_path, *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == f"run_bench: error: {message}"
    assert not (tmp_path / "pkhome").exists()


def test_cpu_path_runs_every_step_against_the_stand_in(tmp_path):
    env = make_bench_env(tmp_path / "env")
    out, models = tmp_path / "out", tmp_path / "models"
    done = run_bench(tmp_path, "--gpus", "0", "--set", str(env.set_dir), "--target", str(env.target), "--steps",
                     "default,tree,sampling", "--budgets", "8,16", "--concurrency", "1,4", "--repeats", "1",
                     "--sampling-budget", "8", "--samples", "64", "--sampling-concurrency", "16",
                     "--models", str(models), "--port", str(env.port), "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(summary["steps"]) == {"default", "tree", "sampling"} and summary["ok"]
    for name in ("default", "tree"):
        step = summary["steps"][name]
        assert step["exit_code"] == 0 and step["ok"] and step["failures"] == []
        assert {r["variant"] for r in step["rows"]} == {"baseline", "DFLASH", "DDTREE B=8", "DDTREE B=16"}
        assert all(r["mismatches"] == 0 for r in step["rows"])
        assert json.loads((out / f"{name}.json").read_text())["result"]["variants"]
        assert (out / f"{name}.md").read_text().rstrip().endswith("bench: PASS")
    assert set(summary["steps"]["tree"]["tree_gain"]) == {"ddtree-b8", "ddtree-b16"}
    assert summary["steps"]["sampling"]["sampling"]["DDTREE B=8"] > 1e-3 / 4
    # the models were written once, for real, outside --out, and reused by the sampling step
    assert json.loads((models / "tree" / "draft" / "config.json").read_text())["architectures"] == ["DFlashDraftModel"]
    assert summary["steps"]["sampling"]["models"] == {"reused": str(models / "tree"), "exit_code": 0}
    assert not list(out.rglob("*.safetensors"))
    # the server saw the test-model arguments, room for the highest level, and the set's [bench] ones
    first = (out / "default-logs" / "baseline.log").read_text().splitlines()[0]
    assert "--skip-tokenizer-init" in first and "--max-running-requests 4" in first
    assert "tree gain ddtree-b16:" in done.stdout and "sampling DDTREE B=8: lowest p-value" in done.stdout
    assert "leftover processes: none" in done.stdout and done.stdout.strip().endswith("verdict: PASS")
    assert alive(server_pids(out / "default-logs") | server_pids(out / "sampling-logs")) == set()


def test_a_failing_step_prints_what_to_debug(tmp_path):
    env = make_bench_env(tmp_path / "env")
    out = tmp_path / "out"
    done = run_bench(tmp_path, "--gpus", "0", "--set", str(env.set_dir), "--target", str(env.target), "--steps",
                     "tree", "--budgets", "8", "--concurrency", "1", "--repeats", "1", "--tree-gain", "9",
                     "--models", str(tmp_path / "models"), "--port", str(env.port), "--out", str(out))
    assert done.returncode == 1
    assert "== tree: FAIL (exit 1" in done.stdout
    assert "failure: ddtree-b8: accept length 3.00 is 1.50x DFLASH's 2.00, below the expected 9x" in done.stdout
    assert done.stdout.strip().endswith("verdict: FAIL")
