"""Interruption: SIGKILL, SIGTERM and SIGINT at several moments of a real `patchkit apply` process.

The apply process is paused at a named step through the PATCHKIT_TEST_PAUSE hook, then signalled.
Afterwards the tree must be the base or fully patched, and the next `patchkit apply` must end with
the fully patched tree (recovering from the journal where needed).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.patchset import helpers

MOMENTS = [
    ("staged-3", signal.SIGKILL),
    ("staged-3", signal.SIGTERM),
    ("staged-3", signal.SIGINT),
    ("journal", signal.SIGKILL),
    ("ref-moved", signal.SIGKILL),
    ("ref-moved", signal.SIGTERM),
]


def start_paused_apply(fx, step: str) -> subprocess.Popen:
    env = helpers.cli_env({"PATCHKIT_TEST_PAUSE": step, "PATCHKIT_TEST_PAUSE_S": "60"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkit", "apply", "--set", str(fx.set_dir), "--target", str(fx.target)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stderr:
        if line.strip() == f"patchkit-test-pause: {step}":
            return proc
    proc.kill()
    raise AssertionError(f"apply never reached {step}: {proc.communicate()}")


def full_head(fx, tmp_path) -> str:
    """The head a complete apply produces (commit ids are reproducible)."""
    other = tmp_path / "reference"
    assert helpers.invoke("base", "fetch", "--set", str(fx.set_dir), "--dest", str(other)).exit_code == 0
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(other)).exit_code == 0
    return helpers.Repo(other).run("rev-parse", "HEAD")


@pytest.mark.parametrize("step,signum", MOMENTS, ids=[f"{s}-{g.name}" for s, g in MOMENTS])
def test_interrupted_apply_ends_clean(fx, tmp_path, step, signum):
    base_snapshot = helpers.tree_snapshot(fx.target)
    patched = full_head(fx, tmp_path)
    patched_snapshot = helpers.tree_snapshot(tmp_path / "reference")

    objects = helpers.object_files(fx.target)
    proc = start_paused_apply(fx, step)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    if signum == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130, err

    head = fx.head()
    if signum != signal.SIGKILL:  # a catchable signal never leaves anything to recover
        assert (head, helpers.tree_snapshot(fx.target)) in [
            (fx.base_commit, base_snapshot),
            (patched, patched_snapshot),
        ]
        assert not (fx.target / ".git/patchkit-apply.json").exists()
    if step.startswith("staged"):
        assert head == fx.base_commit and helpers.tree_snapshot(fx.target) == base_snapshot
        assert helpers.object_files(fx.target) == objects, "staged objects never left quarantine"

    status = helpers.run_cli("status", "--set", str(fx.set_dir), "--target", str(fx.target), "--json")
    doc = json.loads(status.stdout)
    assert doc["result"]["state"] in ("base", "applied"), doc
    assert helpers.tree_snapshot(fx.target) in (base_snapshot, patched_snapshot)

    again = helpers.run_cli("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert again.returncode == 0, again.stdout + again.stderr
    assert fx.head() == patched
    assert helpers.tree_snapshot(fx.target) == patched_snapshot
    assert fx.repo().porcelain_status() == []
    assert not (fx.target / ".git/patchkit-apply.json").exists()


def test_journal_is_recovered_by_apply_without_status(fx, tmp_path):
    """kill -9 after the ref moved; the next apply (not status) finishes the work-tree update."""
    patched = full_head(fx, tmp_path)
    proc = start_paused_apply(fx, "ref-moved")
    proc.kill()
    proc.communicate(timeout=60)
    assert (fx.target / ".git/patchkit-apply.json").exists()
    assert fx.head() == patched  # the ref moved, the work tree did not: exactly what the journal is for
    again = helpers.run_cli("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert again.returncode == 0
    assert "finished an interrupted apply" in again.stdout
    assert fx.repo().porcelain_status() == []
