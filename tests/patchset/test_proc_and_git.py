"""The subprocess and git wrappers: timeouts and failures in the error family, a fixed git config and
environment whatever the caller's shell holds, interrupted children reported as interruptions."""

from __future__ import annotations

import subprocess
import sys

import pytest

from patchkit import proc
from patchkit.errors import EXIT_INTERNAL, Internal
from patchkit.git import GitFailed, Repo, init_repo
from tests.patchset import helpers


def test_a_timeout_is_command_timed_out_with_the_partial_output():
    with pytest.raises(proc.CommandTimedOut) as caught:
        proc.run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"], timeout=1.5)
    error = caught.value
    assert isinstance(error, Internal) and isinstance(error, subprocess.TimeoutExpired)
    assert error.exit_code == EXIT_INTERNAL and error.timeout == 1.5
    assert error.completed.stdout == "started\n" and "timed out after 1.5 s" in error.message


def test_a_failure_is_an_internal_error_carrying_the_output_tails():
    with pytest.raises(proc.CommandFailed) as caught:
        proc.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(4)"])
    assert caught.value.exit_code == EXIT_INTERNAL
    assert caught.value.completed.returncode == 4
    assert "stdout:\nout" in caught.value.message and "stderr:\nerr" in caught.value.message
    assert proc.run([sys.executable, "-c", "raise SystemExit(5)"], check=False).returncode == 5


def test_a_child_killed_by_sigint_is_an_interruption_not_a_failure():
    with pytest.raises(KeyboardInterrupt):
        proc.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGINT)"])


def test_own_group_children_do_not_get_the_groups_ctrl_c(tmp_path):
    """What makes the commit step safe from a terminal's Ctrl-C: git runs in a group of its own."""
    script = (
        "import os, signal, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from patchkit import proc\n"
        "signal.signal(signal.SIGINT, lambda *a: None)  # the parent holds the signal, as in the commit step\n"
        "done = proc.run([sys.executable, '-c', 'import os, signal, time; os.killpg(os.getppid(), signal.SIGINT);"
        " time.sleep(0.5); print(\"survived\")'], own_group=True)\n"
        "print(done.stdout.strip())\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(helpers.REPO_ROOT)], capture_output=True, text=True,
                          start_new_session=True, timeout=60)
    assert done.stdout.strip() == "survived", done.stderr


def test_git_ignores_the_callers_repository_variables_and_config(tmp_path, monkeypatch):
    repo = init_repo(tmp_path / "repo", "main")
    helpers.write(repo.path / "a.txt", "a\n")
    helpers.commit_all(repo, "a\n", "2026-01-01T00:00:00+0000")
    other = init_repo(tmp_path / "other", "main")
    monkeypatch.setenv("GIT_DIR", str(other.path / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "stray-index"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.autocrlf'='true'")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".gitconfig").write_text("[diff]\n\tnoprefix = true\n[core]\n\tautocrlf = true\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert repo.rev("HEAD") is not None, "GIT_DIR of the caller did not redirect us"
    assert repo.status_entries() == []
    assert repo.run("config", "--get", "core.autocrlf") == "false"
    helpers.write(repo.path / "a.txt", "b\n")
    assert "diff --git a/a.txt b/a.txt" in repo.run("diff")
    assert not (tmp_path / "stray-index").exists()


def test_an_unexpected_git_failure_is_git_failed_exit_3(tmp_path):
    repo = init_repo(tmp_path / "repo", "main")
    with pytest.raises(GitFailed) as caught:
        repo.run("cat-file", "blob", "0" * 40)
    assert caught.value.exit_code == EXIT_INTERNAL and "cat-file" in caught.value.message


def test_the_git_dir_of_a_linked_worktree_and_its_common_dir(tmp_path):
    repo = init_repo(tmp_path / "repo", "main")
    helpers.write(repo.path / "a.txt", "a\n")
    helpers.commit_all(repo, "a\n", "2026-01-01T00:00:00+0000")
    repo.run("worktree", "add", "-q", "--detach", str(tmp_path / "linked"))
    linked = Repo(tmp_path / "linked")
    assert linked.git_dir == (repo.path / ".git" / "worktrees" / "linked").resolve()
    assert linked.common_dir == (repo.path / ".git").resolve()
    assert linked.objects_dir == (repo.path / ".git" / "objects").resolve()
