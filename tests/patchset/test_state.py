"""patchset.state: the one definition of the base, touched files, patched-by and exactness.

Real repositories throughout; the git-kind case has upstream history BELOW the pin, which is what
the old root-commit definition got wrong (30 touched files instead of 1).
"""

from __future__ import annotations

import dataclasses

import pytest

from patchkit import manifest
from patchkit.errors import BadInput
from patchkit.git import Repo, init_repo
from patchkit.patchset import state
from patchkit.patchset.series import load_set
from tests.patchset import helpers

GIT_MANIFEST = """\
[set]
name = "one"
version = "0.1.0"
description = "one patch on a git base with history"
python = ["3.11"]

[base]
kind = "git"

[base.git]
url = "https://example.invalid/upstream.git"
commit = "{commit}"
"""

PYPI_MANIFEST = """\
[set]
name = "wheel"
version = "0.1.0"
description = "a pypi base"
python = ["3.11"]

[base]
kind = "pypi"

[base.pypi]
package = "pkg"
version = "1.0"
wheel = "pkg-1.0-py3-none-any.whl"
sha256 = "{sha}"
layout = {{ "pkg/" = "python/pkg/" }}
"""


def git_base_with_history(tmp_path):
    """Upstream: README, then 30 modules (the pin); then one patch commit changing m1.py."""
    root = tmp_path / "tree"
    repo = init_repo(root, "main")
    helpers.write(root / "README", "upstream\n")
    helpers.commit_all(repo, "first upstream commit\n", "2025-01-01T00:00:00+0000")
    for i in range(30):
        helpers.write(root / f"m{i}.py", f"X = {i}\n")
    pin = helpers.commit_all(repo, "thirty modules\n", "2025-01-02T00:00:00+0000")
    set_dir = tmp_path / "set"
    helpers.write(set_dir / "manifest.toml", GIT_MANIFEST.format(commit=pin))
    helpers.write(root / "m1.py", "X = 100\n")
    helpers.commit_all(repo, "patch m1\n", "2026-01-01T00:00:00+0000")
    return repo, pin, manifest.load(set_dir)


def test_git_kind_touched_counts_only_changes_after_the_pin_not_upstream_history(tmp_path):
    repo, pin, man = git_base_with_history(tmp_path)
    assert state.base_commit(repo, man) == pin
    assert state.touched(repo, man) == ("m1.py",)


def test_touched_holds_uncommitted_and_untracked_files_but_not_deletions_or_bytecode(tmp_path):
    repo, _, man = git_base_with_history(tmp_path)
    helpers.write(repo.path / "m2.py", "X = 'edited, not committed'\n")
    helpers.write(repo.path / "new_module.py", "NEW = 1\n")
    (repo.path / "m3.py").unlink()
    helpers.write(repo.path / "__pycache__/m1.cpython-311.pyc", "bytecode")
    helpers.write(repo.path / "sub/stale.pyc", "bytecode")
    assert state.touched(repo, man) == ("m1.py", "m2.py", "new_module.py")


def test_base_is_the_newest_first_parent_ancestor_with_the_locked_tree(fx):
    """A tree built elsewhere (other message and date, same files) counts as the base."""
    repo = fx.repo()
    man = load_set(fx.set_dir).manifest
    tree = repo.tree_of("HEAD")
    env = helpers.identity_env("Someone Else", "else@example.org", "2026-04-01T00:00:00+0000")
    rebuilt = repo.run("commit-tree", tree, "-p", "HEAD", "-m", "same files, rebuilt", env=env)
    repo.run("reset", "-q", "--hard", rebuilt)
    assert state.base_commit(repo, man) == rebuilt  # newest first: not the pinned commit below it
    helpers.write(fx.target / "pkg/core.py", "changed\n")
    helpers.commit_all(repo, "user change\n", "2026-04-02T00:00:00+0000")
    assert state.base_commit(repo, man) == rebuilt
    assert state.touched(repo, man) == ("pkg/core.py",)


def test_pypi_base_is_found_by_the_fetch_message_without_a_lock(tmp_path):
    sha = "ab" * 32
    set_dir = tmp_path / "set"
    helpers.write(set_dir / "manifest.toml", PYPI_MANIFEST.format(sha=sha))
    man = manifest.load(set_dir)
    repo = init_repo(tmp_path / "tree", "patchkit")
    helpers.write(repo.path / "python/pkg/a.py", "A = 1\n")
    root = helpers.commit_all(repo, state.base_message(man.pypi), "2026-01-01T00:00:00+0000")
    helpers.write(repo.path / "python/pkg/a.py", "A = 2\n")
    helpers.commit_all(repo, "patch a\n", "2026-01-02T00:00:00+0000")
    assert state.base_commit(repo, man) == root
    assert state.touched(repo, man) == ("python/pkg/a.py",)
    # a root commit with another message (another wheel) is not this base
    other = init_repo(tmp_path / "other", "patchkit")
    helpers.write(other.path / "python/pkg/a.py", "A = 1\n")
    helpers.commit_all(other, "base: pkg 1.0, wheel sha256 " + "cd" * 32 + "\n", "2026-01-01T00:00:00+0000")
    assert state.base_commit(other, man) is None


def test_missing_base_is_none_and_touched_refuses_naming_the_tree(tmp_path):
    _, _, man = git_base_with_history(tmp_path)
    unrelated = init_repo(tmp_path / "unrelated", "main")
    helpers.write(unrelated.path / "x.py", "x\n")
    helpers.commit_all(unrelated, "unrelated\n", "2026-01-01T00:00:00+0000")
    assert state.base_commit(unrelated, man) is None
    with pytest.raises(BadInput, match="does not contain the base"):
        state.touched(unrelated, man)
    empty = init_repo(tmp_path / "empty", "main")
    assert state.base_commit(empty, man) is None


def test_patched_by_is_true_only_for_the_set_applied(fx):
    man = load_set(fx.set_dir).manifest
    assert state.patched_by(fx.repo(), man) is False
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    assert state.patched_by(fx.repo(), man) is True
    other_version = dataclasses.replace(man, set=dataclasses.replace(man.set, version="9.9.9"))
    assert state.patched_by(fx.repo(), other_version) is False


def test_exactness_of_base_applied_and_bytecode(fx):
    pset = load_set(fx.set_dir)
    found = state.exactness(fx.repo(), pset)
    assert (found.state, found.exact, len(found.missing)) == ("base", False, 5)
    assert "is not patched by tiny@1.0.0" in found.statement() and "patchkit apply" in found.fix()
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    found = state.exactness(fx.repo(), pset)
    assert found.exact and found.drift == () and found.fix() == ""
    assert "is exactly tiny@1.0.0 applied" in found.statement()
    helpers.write(fx.target / "pkg/__pycache__/core.cpython-311.pyc", "derived by an import")
    assert state.exactness(fx.repo(), pset).exact, "bytecode never makes a tree drift"


def test_hand_patched_tree_with_an_unrelated_edit_is_not_exact(fx):
    """What verify must refuse to call 'the set': right bytes by hand, no commits, plus an edit."""
    pset = load_set(fx.set_dir)
    repo = fx.repo()
    for patch in pset.patches:
        repo.run("apply", "--index", "-", input=patch.diff)
    helpers.write(fx.target / "README.txt", "an unrelated edit\n")
    found = state.exactness(repo, pset)
    assert found.state == "drift" and not found.exact
    paths = {e.path: e.reason for e in found.drift}
    assert paths["README.txt"] == "uncommitted: M"
    assert paths["0001-Patch-f2-in-core.patch"] == "not applied"
    assert "is not exactly tiny@1.0.0 applied" in found.statement()
    assert "patchkit refresh" in found.fix()


def test_not_base_state_names_the_fix(tmp_path, fx):
    pset = load_set(fx.set_dir)
    unrelated = init_repo(tmp_path / "unrelated", "main")
    helpers.write(unrelated.path / "x.py", "x\n")
    helpers.commit_all(unrelated, "unrelated\n", "2026-01-01T00:00:00+0000")
    found = state.exactness(Repo(unrelated.path), pset)
    assert found.state == "not-base" and "patchkit base fetch" in found.fix()


# ---------------------------------------------------------------------- the batched exactness check
def _matches_alone(repo, commit, diff):
    """The per-commit definition the batch replaces: four git calls per commit."""
    theirs = repo.run("patch-id", "--stable", input=diff).split()[:1]
    for renames in ("--no-renames", "-M"):
        shown = repo.run_bytes("diff-tree", "-p", "--full-index", renames, f"{commit}^", commit)[1]
        if theirs and repo.run("patch-id", "--stable", input=shown).split()[:1] == theirs:
            return True
    return False


def test_patches_match_in_one_batch_agrees_with_each_commit_checked_alone(fx):
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    repo = fx.repo()
    commits = repo.first_parent_log(fx.base_commit)
    parents = [fx.base_commit, *commits[:-1]]
    # every commit against every patch of the set, and against its own change in -M form and in
    # no-renames form, and against an empty diff (which matches nothing)
    diffs = [p.diff for p in load_set(fx.set_dir).patches]
    diffs += [repo.run_bytes("diff-tree", "-p", "--full-index", mode, f"{c}^", c)[1]
              for c in commits for mode in ("-M", "--no-renames")]
    cases = [(c, parents[i], d) for i, c in enumerate(commits) for d in [*diffs, b""]]
    found = state.patches_match(repo, cases)
    assert found == [_matches_alone(repo, c, d) for c, _, d in cases]
    own = [found[i * (len(diffs) + 1) + i] for i in range(len(commits))]
    assert all(own) and sum(found) < len(found) / 2, "each commit matches its own patch, not the others"
    assert state.patches_match(repo, []) == []


def test_commit_messages_in_one_call_are_each_commit_message(fx):
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    repo = fx.repo()
    commits = [*repo.first_parent_log(fx.base_commit), fx.base_commit]
    assert repo.commit_messages(commits) == {c: repo.commit_message(c) for c in commits}
    assert repo.commit_messages([]) == {}


def _extra_commit(fx):
    helpers.write(fx.target / "pkg/late.py", "LATE = 1\n")
    helpers.commit_all(fx.repo(), "a commit of the user's\n", "2026-03-01T00:00:00+0000")


def _other_set(fx):
    """The set's last patch edited by hand: the tree no longer holds that set."""
    pset = load_set(fx.set_dir)
    path = fx.set_dir / pset.patches[-1].name
    lines = path.read_text().splitlines(keepends=True)
    added = next(n for n, line in enumerate(lines) if line.startswith("+") and not line.startswith("+++"))
    lines[added] = lines[added].rstrip("\n") + " (edited)\n"  # an added line's text: the hunk still applies
    path.write_text("".join(lines))
    result = helpers.invoke("lock", "--set", str(fx.set_dir))
    assert result.exit_code == 0, result.output


def _amended_last_commit(fx):
    repo = fx.repo()
    helpers.write(fx.target / "pkg/extra.py", "changed\n")
    repo.run("add", "-A")
    env = helpers.identity_env("Ada Lovelace", "ada@example.org", "2026-02-05T10:00:00+0000")
    amended = repo.run("commit-tree", repo.run("write-tree"), "-p", "HEAD^", "-F", "-", env=env,
                       input=repo.commit_message("HEAD"))
    repo.run("reset", "-q", "--hard", amended)


OFF_THE_SET = {
    "unstaged edit of a tracked file": lambda fx: helpers.write(fx.target / "README.txt", "edited\n"),
    "staged edit of a tracked file": lambda fx: (helpers.write(fx.target / "README.txt", "edited\n"),
                                                  fx.repo().run("add", "README.txt")),
    "new untracked file": lambda fx: helpers.write(fx.target / "pkg/stray.py", "STRAY = 1\n"),
    "deleted file": lambda fx: (fx.target / "README.txt").unlink(),
    "missing last patch": lambda fx: fx.repo().run("reset", "-q", "--hard", "HEAD^"),
    "extra commit": _extra_commit,
    "different set": _other_set,
    "commit that differs from its patch": _amended_last_commit,
    # git status does not compare these files' bytes: the exactness check must not trust it for them
    "edit of a file marked assume-unchanged": lambda fx: (
        fx.repo().run("update-index", "--assume-unchanged", "README.txt"),
        helpers.write(fx.target / "README.txt", "edited\n")),
    "edit of a file marked skip-worktree": lambda fx: (
        fx.repo().run("update-index", "--skip-worktree", "README.txt"),
        helpers.write(fx.target / "README.txt", "edited\n")),
}


@pytest.mark.parametrize("change", sorted(OFF_THE_SET))
def test_exactness_catches_every_way_off_the_set(fx, change):
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    assert state.exactness(fx.repo(), load_set(fx.set_dir)).exact
    OFF_THE_SET[change](fx)
    found = state.exactness(fx.repo(), load_set(fx.set_dir))
    assert not found.exact and found.state in ("drift", "partial"), found.statement()
    if "marked" in change:
        assert [(e.path, e.reason.split()[0]) for e in found.drift] == [("README.txt", change.split()[-1])]
