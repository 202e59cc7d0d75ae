"""Ctrl-C as a terminal sends it (to the whole process group) and SIGTERM at any
moment end in exit 130 with the documented message and a tree that is the base or fully patched.

The apply runs in its own session, as a terminal's foreground job; ``os.killpg`` then reaches the
process group exactly as Ctrl-C would, git children included unless they run in a group of their own.
"""

from __future__ import annotations

import os
import random
import signal
import time

from tests.patchset import helpers


def apply_args(fx):
    return ("apply", "--set", str(fx.set_dir), "--target", str(fx.target))


def test_ctrl_c_to_the_group_in_the_commit_step_completes_it_and_exits_130(fx, tmp_path):
    patched, patched_snapshot = helpers.patched_reference(fx, tmp_path / "reference")
    proc = helpers.start_paused(*apply_args(fx), step="ref-moved", seconds=2, new_session=True)
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = helpers.finish(proc)
    assert code == 130, out + err
    assert "interrupted during the commit step, which was completed first" in err
    assert fx.head() == patched and helpers.tree_snapshot(fx.target) == patched_snapshot
    assert fx.repo().porcelain_status() == [] and not helpers.journal(fx).exists()


def test_ctrl_c_to_the_group_while_staging_changes_nothing(fx):
    before, objects = helpers.tree_snapshot(fx.target), helpers.object_files(fx.target)
    proc = helpers.start_paused(*apply_args(fx), step="staged-2", new_session=True)
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = helpers.finish(proc)
    assert code == 130, out + err
    assert "patchkit apply: error: interrupted by SIGINT; nothing was changed" in err
    assert fx.head() == fx.base_commit and helpers.tree_snapshot(fx.target) == before
    assert helpers.object_files(fx.target) == objects


def test_sigterm_before_any_work_is_130_with_the_message(fx):
    """Regression: SIGTERM before the handler was installed gave 143 and no message."""
    proc = helpers.start_paused(*apply_args(fx), step="startup")
    proc.terminate()
    code, out, err = helpers.finish(proc)
    assert code == 130, out + err
    assert "interrupted by SIGTERM while starting; nothing was changed" in err
    assert fx.head() == fx.base_commit


def test_ctrl_c_at_random_moments_never_ends_in_a_git_error(fx, tmp_path):
    """Regression: a group Ctrl-C killed git's children: exit 1 'git read-tree failed' instead of 130."""
    patched, patched_snapshot = helpers.patched_reference(fx, tmp_path / "reference")
    base_snapshot = helpers.tree_snapshot(fx.target)
    rng = random.Random(1313)
    for _ in range(4):
        # from patchkit's first line on (the interpreter's own start-up is Python's, not ours)
        proc = helpers.start_paused(*apply_args(fx), step="startup", seconds=0, new_session=True)
        time.sleep(rng.uniform(0.0, 1.2))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        code, out, err = helpers.finish(proc)
        assert code in (0, 130), out + err
        assert "failed with exit code" not in err and "Traceback" not in err
        assert (fx.head(), helpers.tree_snapshot(fx.target)) in [
            (fx.base_commit, base_snapshot),
            (patched, patched_snapshot),
        ]
        fx.repo().run("reset", "-q", "--hard", fx.base_commit)
