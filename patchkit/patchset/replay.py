"""The git side of ``patchkit port``: its work repository and the 3-way replay of one patch.

The work repository borrows the objects of both fetched bases (hard links: objects never change),
so it stands on its own if a base tree is deleted later. A patch is replayed as ``cherry-pick``
would replay it (merge-ort with base C(i-1), ours N(i-1), theirs Ci) but without a work tree:
``git merge-tree --write-tree``. Only a stop checks the work tree out, with ``git cherry-pick``
itself, so the user finds the state git users know (markers, ``CHERRY_PICK_HEAD``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.git import PATCHKIT_EMAIL, PATCHKIT_NAME, Repo, identity_env, init_repo
from patchkit.patchset.base import BASE_DATE
from patchkit.patchset.series import TRAILER_PATCH, TRAILER_SET

BRANCH = "port"
#: Conflict style of the work tree: diff3 shows the old lines between the two sides.
CONFLICT_STYLE = "diff3"
#: What the work tree ignores (its .git/info/exclude).
IGNORED = ("__pycache__/", "*.pyc", ".pytest_cache/")


def borrow_objects(source: Repo, dest: Repo) -> None:
    """Hard-link (or copy) every object file of ``source`` into ``dest``."""
    src_objects, dst_objects = source.git_dir / "objects", dest.git_dir / "objects"
    for path in src_objects.rglob("*"):
        rel = path.relative_to(src_objects)
        target = dst_objects / rel
        if path.is_dir() or rel.parts[0] == "info" or target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:  # another file system
            shutil.copy2(path, target)
    alternates = src_objects / "info" / "alternates"
    if alternates.is_file():  # a source that borrows objects itself: borrow from the same place
        mine = dst_objects / "info" / "alternates"
        mine.parent.mkdir(parents=True, exist_ok=True)
        with open(mine, "a", encoding="utf-8") as handle:
            handle.write(alternates.read_text(encoding="utf-8"))


def create_work_repo(tree: Path, sources: list[Path], old_base: str, new_base: str) -> Repo:
    """A repository at ``tree`` holding both bases, branch ``port`` at the new one, nothing checked out."""
    repo = init_repo(tree, BRANCH)
    for source in sources:
        borrow_objects(Repo(source), repo)
    repo.run("update-ref", "refs/port/old-base", old_base)
    repo.run("update-ref", "refs/port/new-base", new_base)
    repo.run("update-ref", f"refs/heads/{BRANCH}", new_base)
    # the user's resolution commits get a fixed committer; the author comes from CHERRY_PICK_HEAD
    for key, value in (("merge.conflictStyle", CONFLICT_STYLE), ("user.name", PATCHKIT_NAME),
                       ("user.email", PATCHKIT_EMAIL)):
        repo.run("config", key, value)
    # byte-compiling a resolution to check it must not put caches into the commit (`git add -A`)
    exclude = repo.git_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text("".join(f"{pattern}\n" for pattern in IGNORED), encoding="utf-8")
    return repo


def tip(repo: Repo) -> str:
    commit = repo.rev(f"refs/heads/{BRANCH}")
    assert commit is not None, "the work repository always has its branch"
    return commit


def move_branch(repo: Repo, new: str, old: str) -> None:
    """Compare-and-swap the work branch from ``old`` to ``new``."""
    repo.run("update-ref", f"refs/heads/{BRANCH}", new, old)


# ---------------------------------------------------------------------- one patch
@dataclass(frozen=True, kw_only=True)
class Merge:
    tree: str
    conflicts: tuple[str, ...]  # paths with conflicts
    messages: str  # git's informational lines about them


def _synthetic(repo: Repo, tree: str, parent: str | None) -> str:
    env = identity_env(PATCHKIT_NAME, PATCHKIT_EMAIL, BASE_DATE)
    parents = ["-p", parent] if parent else []
    return repo.run("commit-tree", "--no-gpg-sign", tree, *parents, "-m", "port: merge input", env=env)


def three_way(repo: Repo, base: str, ours: str, theirs: str) -> Merge:
    """merge-ort of the change ``base -> theirs`` onto ``ours``, without a work tree.

    ``git merge-tree --write-tree`` (git >= 2.38) finds the merge base itself, so both sides are
    recorded as commits whose only parent has ``base``'s tree.
    """
    root = _synthetic(repo, repo.tree_of(base), None)
    left, right = _synthetic(repo, repo.tree_of(ours), root), _synthetic(repo, repo.tree_of(theirs), root)
    status, out, err = repo.run_bytes("merge-tree", "--write-tree", "-z", left, right, check=False)
    if status not in (0, 1):
        raise BadInput(f"git merge-tree failed: {err.strip()}", hint="patchkit port needs git >= 2.38")
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    conflicts, index = [], 1
    while status == 1 and index < len(fields) and fields[index]:
        conflicts.append(fields[index].split("\t", 1)[1])  # "<mode> <object> <stage>\t<path>"
        index += 1
    messages = _merge_messages(fields[index + 1 :]) if status == 1 else ""
    return Merge(tree=fields[0], conflicts=tuple(dict.fromkeys(conflicts)), messages=messages)


def _merge_messages(fields: list[str]) -> str:
    """The informational part of ``merge-tree -z``: path count, paths, type, message; repeated."""
    messages, i = [], 0
    while i < len(fields) and fields[i].isdigit():
        count = int(fields[i])
        if i + count + 2 < len(fields):
            messages.append(fields[i + count + 2].strip())
        i += count + 3
    return "\n".join(m for m in messages if m)


def edited_paths(repo: Repo, base: str, tip_: str) -> tuple[str, ...]:
    """Files of ``base`` that ``base..tip_`` modifies, deletes or retypes (renames count as deletes)."""
    out = repo.run_bytes("diff", "--name-status", "-z", "--no-renames", base, tip_)[1]
    fields = [f for f in out.decode("utf-8", "surrogateescape").split("\0") if f]
    return tuple(sorted(path for status, path in zip(fields[::2], fields[1::2], strict=True)
                        if status in ("M", "D", "T")))


def missing_targets(repo: Repo, parent: str, commit: str, onto: str) -> tuple[str, ...]:
    """Files ``parent..commit`` edits that ``onto`` does not have."""
    edited = edited_paths(repo, parent, commit)
    present = repo.ls_tree(onto, list(edited)) if edited else {}
    return tuple(p for p in edited if p not in present)


def author_env(repo: Repo, commit: str) -> dict[str, str]:
    name, email, date = repo.run("log", "-1", "--format=%an%x00%ae%x00%ad", "--date=raw", commit).split("\0")
    return identity_env(name, email, date)


def commit_like(repo: Repo, source: str, tree: str, parent: str, message: str | None = None) -> str:
    """A commit of ``tree`` on ``parent`` with ``source``'s author (and message); reproducible ids."""
    text = repo.commit_message(source) if message is None else message
    return repo.run("commit-tree", "--no-gpg-sign", tree, "-p", parent, "-F", "-", env=author_env(repo, source),
                    input=text)


def clean_message(repo: Repo, message: str) -> str:
    """``message`` as git's editor cleanup leaves it, without our trailer lines; one final newline."""
    text = repo.run("stripspace", "--strip-comments", input=message)
    kept = [line for line in text.splitlines() if not line.startswith((f"{TRAILER_SET}: ", f"{TRAILER_PATCH}: "))]
    return repo.run("stripspace", input="\n".join(kept) + "\n") + "\n"


def without_trailers(repo: Repo, commits: list[str], parent: str) -> str:
    """A copy of the chain ``commits`` on ``parent`` whose messages lack our trailers (for range-diff)."""
    for commit in commits:
        message = clean_message(repo, repo.commit_message(commit))
        parent = commit_like(repo, commit, repo.tree_of(commit), parent, message=message)
    return parent


# ---------------------------------------------------------------------- the work tree, at a stop
def clear_pick(repo: Repo) -> None:
    """Forget a cherry-pick in progress (and a lock a killed git left)."""
    for name in ("CHERRY_PICK_HEAD", "MERGE_MSG", "index.lock"):
        (repo.git_dir / name).unlink(missing_ok=True)


def reset_work_tree(repo: Repo, commit: str) -> None:
    """Work tree and index exactly at ``commit`` (the first time: a full checkout)."""
    clear_pick(repo)
    repo.run("reset", "-q", "--hard", commit)
    repo.run("clean", "-fdq")


def check_out_pick(repo: Repo, ours: str, theirs: str) -> str:
    """``git cherry-pick theirs`` in the work tree at ``ours``; what git said.

    A pick that git could do after all (it followed a rename to a file the patch's path lost) is
    left staged, not committed, so the user reviews it before ``--continue``.
    """
    reset_work_tree(repo, ours)
    status, _, err = repo.run_bytes("cherry-pick", theirs, env=author_env(repo, theirs), check=False)
    if status == 0:
        repo.run("reset", "-q", "--soft", ours)
    elif not (repo.git_dir / "CHERRY_PICK_HEAD").exists():
        raise BadInput(f"git cherry-pick failed in {repo.path}: {err.strip()}")
    return err.strip()


def unmerged_paths(repo: Repo) -> list[str]:
    return sorted(set(repo.run("diff", "--name-only", "--diff-filter=U").splitlines()))


def conflict_marker_files(repo: Repo, base: str, head: str) -> list[str]:
    """Files whose lines added in ``base..head`` include a conflict marker."""
    current, found = "?", []
    for line in repo.run("diff", "--no-color", "--no-ext-diff", "-U0", base, head).splitlines():
        if line.startswith("+++ b/"):
            current = line[6:]
        elif line.startswith(("+<<<<<<< ", "+>>>>>>> ")):
            found.append(current)
    return sorted(set(found))


def binary_files(repo: Repo, base: str, head: str) -> list[str]:
    """Files ``base..head`` changes as binary (``--numstat`` shows ``-`` for their line counts)."""
    out = repo.run_bytes("diff", "--numstat", "-z", "--no-renames", base, head)[1].decode("utf-8", "surrogateescape")
    return sorted(record.split("\t", 2)[2] for record in out.split("\0") if record.startswith("-\t-\t"))
