"""The apply journal: makes moving the branch and updating the work tree recoverable after kill -9.

``apply`` writes ``<git dir>/patchkit-apply.json`` (ref, old and new head) before it moves the
ref, and deletes it after the work tree is updated. If the process dies in between, the next
``apply`` or ``status`` calls :func:`recover`: if the ref still points at the old head nothing had
changed and the journal is dropped; if it points at the new head the work tree is reset to it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.git import Repo

JOURNAL_NAME = "patchkit-apply.json"


def path_of(repo: Repo) -> Path:
    return repo.git_dir / JOURNAL_NAME


def write(repo: Repo, ref: str, old: str, new: str, set_label: str) -> Path:
    """Durably record the step about to happen."""
    path = path_of(repo)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"ref": ref, "old": old, "new": new, "set": set_label, "pid": os.getpid()}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
    return path


def remove(repo: Repo) -> None:
    path_of(repo).unlink(missing_ok=True)


def recover(repo: Repo) -> str | None:
    """Finish or roll back an interrupted apply; return what was done, or None without a journal."""
    path = path_of(repo)
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        ref, old, new = entry["ref"], entry["old"], entry["new"]
    except (ValueError, KeyError) as exc:
        path.unlink()  # torn write: the ref had not moved yet (it moves only after a complete journal)
        return f"dropped an unreadable journal ({exc}); nothing had changed"
    # A kill -9 inside git leaves its lock behind; the journal proves that git process was ours.
    (repo.git_dir / "index.lock").unlink(missing_ok=True)
    current = repo.rev(ref)
    if current == old:
        repo.run("reset", "-q", "--hard", old)
        path.unlink()
        return f"rolled back an interrupted apply: {ref} had not moved, the tree is at {old[:12]}"
    if current == new:
        repo.run("reset", "-q", "--hard", new)
        path.unlink()
        return f"finished an interrupted apply: {ref} is at {new[:12]}, work tree updated"
    raise BadInput(
        f"an interrupted apply left {path}, but {ref} is now at {current}, neither {old[:12]} nor {new[:12]}",
        hint=f"inspect the repository, then delete {path}",
    )
