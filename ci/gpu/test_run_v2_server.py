"""CPU tests of ci/gpu/run_v2_server.py against the stand-in server (tests/fixtures/sglang_standin):
every variant starts, answers, is torn down, and the summary says lossless or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STANDIN = REPO / "tests" / "fixtures" / "sglang_standin"


def _tree(tmp_path: Path) -> Path:
    # The driver puts TREE/python first on PYTHONPATH: a tree whose sglang is the stand-in.
    tree = tmp_path / "tree"
    (tree / "python").mkdir(parents=True)
    (tree / "python" / "sglang").symlink_to(STANDIN / "sglang")
    return tree


def _models(tmp_path: Path) -> tuple[Path, Path]:
    paths = []
    for name in ("target", "draft"):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text("{}")
        paths.append(d)
    return paths[0], paths[1]


def _run(tmp_path, *extra, env=None, port=30471):
    tree = _tree(tmp_path)
    target, draft = _models(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, str(HERE / "run_v2_server.py"), "--target", str(tree), "--model", str(target),
           "--draft-model", str(draft), "--out", str(out), "--port", str(port), "--max-new-tokens", "8",
           "--sampled", "2", "--startup-timeout", "60", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
    return proc, summary, out


def test_every_variant_runs_and_is_lossless_against_the_standin(tmp_path):
    proc, summary, out = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["version"] == 1 and summary["pass"] is True
    assert set(summary["servers"]) == {"baseline", "dflash", "dflash-sync", "ddtree", "ddtree-sync"}
    for variant in ("dflash", "dflash-sync", "ddtree", "ddtree-sync"):
        row = summary["servers"][variant]
        assert row["teardown"] == "sigterm"
        for mode in ("serial", "concurrent"):
            assert row[mode]["lossless"]["mismatches"] == []
            assert row[mode]["lossless"]["identical"] == row[mode]["requests"] > 0
    assert "sampled_equal_to_baseline" in summary["servers"]["ddtree"]
    assert (out / "ddtree-sync.log").exists()
    # The non-overlap server really got --disable-overlap-schedule.
    raw = json.loads((out / "raw.json").read_text())
    assert "--disable-overlap-schedule" in raw["ddtree-sync"]["command"]
    assert "--disable-overlap-schedule" in raw["dflash-sync"]["command"]
    assert "--disable-overlap-schedule" not in raw["ddtree"]["command"]


def test_a_diverging_speculative_server_fails_the_run(tmp_path):
    proc, summary, _ = _run(tmp_path, "--variants", "baseline,ddtree",
                            env={"SGLANG_STANDIN_DIVERGE_AT": "3", "SGLANG_STANDIN_ROLE": "spec"})
    assert proc.returncode == 1
    assert summary["pass"] is False
    assert summary["servers"]["ddtree"]["serial"]["lossless"]["mismatches"]


def test_bad_options_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(HERE / "run_v2_server.py"), "--target", str(tmp_path),
                           "--model", str(tmp_path), "--draft-model", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "no python/sglang" in proc.stderr
