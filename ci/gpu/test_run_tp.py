"""The N-GPU one-command driver, run for real on CPU: gloo ranks, the stand-in SGLang server.

Run with ``python -m pytest ci/gpu -q`` (not under the default ``testpaths``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.testing import patched_tree
from tests.smoke.conftest import MANIFEST, PROMPTS, SET_ID, free_port, make_model, make_target

pytestmark = pytest.mark.long  # a minute or more: scheduled first (conftest.py)

REPO_ROOT = Path(__file__).resolve().parents[2]
SET_DIR = REPO_ROOT / "ddtree_patches" / "v1"
RUN_TP = REPO_ROOT / "ci" / "gpu" / "run_tp.sh"
MODULE = Path("python/sglang/srt/speculative/ddtree_utils.py")


@pytest.fixture(scope="module")
def ddtree_utils_path() -> Path:
    return Path(patched_tree(SET_DIR)) / MODULE


def run_tp(tmp: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "HOME": str(tmp / "home"),
           "PATCHKIT_HOME": str(tmp / "pkhome"), "NCCL_NVLS_ENABLE": "1"}
    return subprocess.run(["bash", str(RUN_TP), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=tmp)


@pytest.mark.parametrize("args,message", [
    (["x"], "N must be a positive number of GPUs, got 'x'"),
    (["0"], "N must be a positive number of GPUs, got '0'"),
    (["2", "--model", "m"], "--model and --draft-model go together"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, message):
    done = run_tp(tmp_path, *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == f"run_tp: error: {message}"
    assert not (tmp_path / "pkhome").exists()  # nothing was started or written


def test_cpu_path_builds_equal_trees_over_gloo_ranks(tmp_path, ddtree_utils_path):
    out = tmp_path / "out"
    done = run_tp(tmp_path, "4", "--device", "cpu", "--ddtree-utils", str(ddtree_utils_path),
                  "--vocab", "3001", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trees"]["equal"] and summary["trees"]["backend"] == "gloo"
    assert summary["trees"]["cases"] == 4 and summary["trees"]["vocab"] == 3001
    assert summary["smoke"] == {"ran": False, "lossless": None, "note": "--device cpu: no server smoke"}
    assert summary["leftover_processes"] == [] and (out / "ps.txt").read_text() == "none\n"
    assert (out / "testmodels" / "target" / "config.json").is_file()
    assert "vocab-parallel trees over 4 ranks == tp 1: yes (gloo, V=3001" in done.stdout
    assert "models split over 4 ranks: yes" in done.stdout
    assert done.stdout.strip().endswith("verdict: PASS")


def test_smoke_step_runs_patchkit_smoke_and_reads_its_verdict(tmp_path, ddtree_utils_path):
    set_dir = tmp_path / "set"
    (set_dir / "smoke").mkdir(parents=True)
    (set_dir / "manifest.toml").write_text(MANIFEST)
    (set_dir / "smoke" / "prompts.jsonl").write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    shutil.copytree(SET_DIR / "tests", set_dir / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    # the TP shard worlds are a shared core test, beside the sets (ddtree_patches/common)
    shutil.copytree(SET_DIR.parent / "common", tmp_path / "common", ignore=shutil.ignore_patterns("__pycache__"))
    target = make_target(tmp_path / "target", f"Patchkit-Set: {SET_ID}")
    out = tmp_path / "out"
    done = run_tp(tmp_path, "2", "--device", "cpu", "--smoke-gpus", "0", "--set", str(set_dir),
                  "--target", str(target), "--ddtree-utils", str(ddtree_utils_path),
                  "--model", str(make_model(tmp_path / "model")), "--draft-model", str(make_model(tmp_path / "d")),
                  "--port", str(free_port()), "--vocab", "1001", "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert done.returncode == 0, done.stdout + done.stderr
    smoke = summary["smoke"]
    assert smoke["ran"] and smoke["lossless"] and smoke["exit_code"] == 0 and smoke["teardown_clean"]
    assert smoke["accept_length"] > 1 and set(smoke["tokens_per_s"]) == {"baseline", "ddtree"}
    assert json.loads((out / "smoke.out").read_text())["result"]["gpus"] == 0  # --smoke-gpus reached smoke
    assert (out / "smoke-logs" / "baseline.log").is_file() and (out / "smoke-logs" / "ddtree.log").is_file()
    tp1 = summary["tp1"]  # the same prompts again at "tp 1" (stand-in: --gpus 0 again)
    assert tp1["ran"] and tp1["lossless"] and (out / "smoke-tp1-logs" / "ddtree.log").is_file()
    assert tp1["same_accept_lengths"] == f"{len(smoke['per_prompt_accept'])}/{len(smoke['per_prompt_accept'])}"
    assert "lossless (DDTREE = baseline, tp 2): yes" in done.stdout
    assert "tp 1 on the same prompts: lossless yes" in done.stdout
    assert "leftover processes: none" in done.stdout


def test_models_that_cannot_split_over_n_ranks_block_the_smoke(tmp_path, ddtree_utils_path):
    """Given 4-head models, tp 8 cannot run: SGLang asserts heads % tp == 0, so the smoke is not started."""
    models = tmp_path / "models"
    subprocess.run([sys.executable, "-m", "patchkit", "testmodels", "--out", str(models)], check=True,
                   capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    out = tmp_path / "out"
    done = run_tp(tmp_path, "8", "--ddtree-utils", str(ddtree_utils_path), "--out", str(out), "--model",
                  str(models / "target"), "--draft-model", str(models / "draft"), timeout=120)
    summary = json.loads((out / "summary.json").read_text())
    assert done.returncode == 1
    assert summary["smoke"]["ran"] is False and summary["smoke"]["lossless"] is False
    assert "num_attention_heads 4 is not divisible by tp 8" in summary["smoke"]["note"]
    assert not (out / "smoke.out").exists()
    assert summary["trees"]["equal"] is False  # no 8 GPUs here: the tree check refuses, it does not pass
    assert "models split over 8 ranks: NO: target (" in done.stdout
    assert done.stdout.strip().endswith("verdict: FAIL")


def test_at_tp_8_the_test_models_get_8_heads_and_split(tmp_path, ddtree_utils_path):
    out = tmp_path / "out"
    done = run_tp(tmp_path, "8", "--device", "cpu", "--ddtree-utils", str(ddtree_utils_path), "--vocab", "1001",
                  "--out", str(out), timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    for role in ("target", "draft"):
        config = json.loads((out / "testmodels" / role / "config.json").read_text())
        assert (config["num_attention_heads"], config["num_key_value_heads"]) == (8, 2)
    assert summary["model_misfits"] == [] and "models split over 8 ranks: yes" in done.stdout
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("tp, heads", [(1, 4), (2, 4), (4, 4), (8, 8), (6, 12), (16, 16)])
def test_test_model_heads(tp, heads):
    assert load_run_tp().test_model_heads(tp) == heads


def load_run_tp():
    spec = importlib.util.spec_from_file_location("run_tp", REPO_ROOT / "ci" / "gpu" / "run_tp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_process_left_with_the_run_tag_is_listed_and_others_are_not(tmp_path):
    run_tp_module = load_run_tp()
    tag = f"test-{os.getpid()}"
    ours = subprocess.Popen(["sleep", "60"], env={**os.environ, run_tp_module.RUN_TAG_ENV: tag})
    other = subprocess.Popen(["sleep", "61"], env={**os.environ, run_tp_module.RUN_TAG_ENV: tag + "-other"})
    try:
        listed = run_tp_module.leftover_processes(tag)
        assert len(listed) == 1 and listed[0].split()[0] == str(ours.pid) and "sleep 60" in listed[0]
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
    assert run_tp_module.leftover_processes(tag) == []
