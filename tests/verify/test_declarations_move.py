"""Coverage declarations by name move with the code: every added function of v2 moved down by two lines
(tests/verify/shift_added_functions.py), locked and verified, changes no finding and no number (slow: it
fetches the base, builds the verify environment, unless ``PATCHKIT_SEEDED_ENV_DIR`` names a folder of
built ones, and runs every gate twice)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.verify.shift_added_functions import COMMENT, patchkit, shift_set

pytestmark = pytest.mark.slow

V2 = Path(__file__).resolve().parents[2] / "ddtree_patches" / "v2"


def _verify(set_dir: Path, tree: Path) -> tuple[int, dict]:
    patchkit("base", "fetch", "--set", set_dir, "--dest", tree)
    patchkit("apply", "--set", set_dir, "--target", tree)
    done = subprocess.run([sys.executable, "-m", "patchkit", "verify", "--set", str(set_dir), "--target", str(tree),
                           "--json"], capture_output=True, text=True, check=False)
    return done.returncode, json.loads(done.stdout)["result"]


def _summary(result: dict) -> tuple[list[str], list[str]]:
    findings = [f for g in result["gates"] for f in g["findings"]]
    problems = [f"{f['severity']} {f['gate']} {f['file']}:{f['line']}: {f['message']}" for f in findings
                if f["severity"] != "info"]
    return problems, [f["message"] for f in findings if "added-line coverage" in f["message"]]


def test_moving_every_added_function_of_v2_keeps_every_finding_and_number(tmp_path):
    shared = os.environ.get("PATCHKIT_SEEDED_ENV_DIR")  # a folder of built verify environments to reuse
    if shared:
        cache = Path(os.environ["PATCHKIT_HOME"]) / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "envs").symlink_to(Path(shared).resolve())
    shifted = shift_set(V2, tmp_path / "shifted")
    assert COMMENT in (shifted / "0007-Speculative-Add-DDTreeWorkerV2.patch").read_text()
    assert (shifted / "manifest.toml").read_text().count('.py:') == (V2 / "manifest.toml").read_text().count('.py:')
    code, original = _verify(V2, tmp_path / "tree-v2")
    moved_code, moved = _verify(shifted, tmp_path / "tree-shifted")
    assert (code, _summary(original)[0]) == (0, [])
    assert (moved_code, _summary(moved)[0]) == (0, [])
    (row,) = _summary(original)[1]
    assert _summary(moved)[1] == [row]
