"""What verify needs from the engine about its target: the base, the touched files, and whether the
tree is exactly the set applied (the statement verify makes before any gate runs).

All three are the engine's answers (:mod:`patchkit.patchset.state`, the one definition of the base
and of drift); this module only asks and turns them into verify's terms. It never writes the
target: no journal recovery, no reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.git import open_repo
from patchkit.manifest import Manifest
from patchkit.patchset import state
from patchkit.patchset.series import load_set
from patchkit.verify.api import VerifyContext


@dataclass(frozen=True, kw_only=True)
class TargetCheck:
    """Whether the target is exactly the set applied to its base, as ``patchkit status`` sees it."""

    state: state.TreeState  # "applied", "base", "partial", "drift" or "not-base"
    statement: str  # one line for people: what the tree is, relative to the set
    fix: str  # what makes the tree exact ("" when it is)
    allowed: bool = False  # not exact, verified anyway because the user passed --allow-drift

    @property
    def exact(self) -> bool:
        return self.state == "applied"


def base_and_touched(root: Path, manifest: Manifest) -> tuple[str, tuple[str, ...]]:
    """The base commit (never the repository's root commit: upstream history sits below a git base)
    and the files that differ from it; BadInput when the tree does not contain the base."""
    repo = open_repo(root)
    return state.require_base(repo, manifest), state.touched(repo, manifest)


def inspect_target(ctx: VerifyContext) -> TargetCheck:
    """The status check (``state.exactness``), read-only."""
    found = state.exactness(open_repo(ctx.root), load_set(ctx.set_dir))
    return TargetCheck(state=found.state, statement=found.statement(), fix=found.fix())


def check_target(ctx: VerifyContext, *, allow_drift: bool) -> TargetCheck:
    """The target check, refusing a tree that is not exactly the set applied unless ``allow_drift``."""
    found = inspect_target(ctx)
    if found.exact:
        return found
    if not allow_drift:
        raise BadInput(found.statement, hint=f"{found.fix}; or pass --allow-drift to verify it as it is")
    return TargetCheck(state=found.state, statement=found.statement, fix=found.fix, allowed=True)


def tree_identity(root: Path) -> str | None:
    """The id of the commit tree that the work tree at ``root`` holds byte for byte, or None when git
    cannot vouch for that: any staged, unstaged, untracked or ignored entry other than bytecode inside
    a ``__pycache__/`` folder, or an index entry git does not compare with the work tree
    (assume-unchanged, skip-worktree, unmerged).

    Stricter than the exactness check, which lets bytecode anywhere pass: a gate result reused by
    this id (:mod:`patchkit.verify.reuse`) was computed from exactly the same files.
    """
    repo = open_repo(root)
    entries = repo.names_z("status", "--porcelain", "-z", "--untracked-files=all", "--ignored=matching",
                           "--no-renames", "--ignore-submodules=none")
    if any(entry[:3] not in ("?? ", "!! ") or "__pycache__/" not in f"/{entry[3:]}" for entry in entries):
        return None
    if repo.unwatched():
        return None
    return repo.run("rev-parse", "--verify", "HEAD^{tree}")
