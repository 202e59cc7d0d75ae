"""Ctrl-C just after the commit step says what was done (the set is applied), never "nothing was
changed" and never an internal error from a half-removed scratch folder; scratch folders are removed
even when the signal lands in their removal, and those a kill -9 left are removed by the next patchkit.

Real processes: paused at the exact step (PATCHKIT_TEST_PAUSE), signalled as a terminal's Ctrl-C does
(to the whole process group), with a temporary directory of their own so its ``patchkit-*`` folders
can be counted before and after.
"""

from __future__ import annotations

import os
import signal

import pytest

from patchkit.patchset import status as status_mod
from tests.patchset import helpers


def apply_args(fx):
    return ("apply", "--set", str(fx.set_dir), "--target", str(fx.target))


def scratch_folders(tmp: os.PathLike) -> list[str]:
    return sorted(name for name in os.listdir(tmp) if name.startswith("patchkit-"))


@pytest.fixture
def own_tmp(tmp_path):
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("step", ["committed", "scratch-cleanup-objects"])
def test_ctrl_c_after_the_commit_step_says_it_completed(fx, tmp_path, own_tmp, step):
    patched, patched_snapshot = helpers.patched_reference(fx, tmp_path / "reference")
    proc = helpers.start_paused(*apply_args(fx), step=step, seconds=1.5, new_session=True,
                                env={"TMPDIR": str(own_tmp)})
    assert scratch_folders(own_tmp), "the quarantine is there while apply runs"
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = helpers.finish(proc)
    assert code == 130, out + err
    assert "interrupted by SIGINT after the commit step, which was completed" in err, err
    assert "nothing was changed" not in err and "internal error" not in err and "Traceback" not in err
    assert fx.head() == patched and helpers.tree_snapshot(fx.target) == patched_snapshot
    state = status_mod.status(fx.set_dir, fx.target)
    assert state.state == "applied" and state.ok
    assert scratch_folders(own_tmp) == [], "the quarantine was removed, whole"


def test_ctrl_c_before_the_commit_step_still_says_nothing_was_changed(fx, own_tmp):
    proc = helpers.start_paused(*apply_args(fx), step="staged-2", new_session=True, env={"TMPDIR": str(own_tmp)})
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = helpers.finish(proc)
    assert code == 130 and "interrupted by SIGINT; nothing was changed" in err, err
    assert fx.head() == fx.base_commit and scratch_folders(own_tmp) == []


def test_scratch_folders_a_kill_9_left_are_removed_by_the_next_patchkit(fx, own_tmp):
    before = scratch_folders(own_tmp)
    proc = helpers.start_paused(*apply_args(fx), step="staged-2", env={"TMPDIR": str(own_tmp)})
    proc.kill()
    helpers.finish(proc)
    left = scratch_folders(own_tmp)
    assert len(left) == len(before) + 2, left  # the quarantine and the scratch index: nothing could remove them
    done = helpers.run_cli(*apply_args(fx), env={"TMPDIR": str(own_tmp)})
    assert done.returncode == 0, done.stderr
    assert scratch_folders(own_tmp) == before == []
