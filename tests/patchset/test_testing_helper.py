"""patchkit.testing.patched_tree: cached, process-safe, and overridable with PATCHKIT_TARGET."""

from __future__ import annotations

import subprocess
import sys

from patchkit import testing
from tests.patchset import helpers

SCRIPT = "import sys; from patchkit.testing import patched_tree; print(patched_tree(sys.argv[1]))"


def test_patched_tree_is_built_once_and_reused(template, tmp_path, monkeypatch):
    _, base_commit, set_dir = template
    monkeypatch.setenv("PATCHKIT_HOME", str(tmp_path / "home"))
    env = helpers.cli_env()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(set_dir)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1, "concurrent callers share one tree"
    tree = testing.patched_tree(set_dir)
    assert str(tree) in paths
    repo = helpers.Repo(tree)
    assert len(repo.first_parent_log(base_commit)) == 5 and repo.porcelain_status() == []


def test_patchkit_target_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_TARGET", str(tmp_path / "mine"))
    assert testing.patched_tree() == tmp_path / "mine"
