"""What verify needs from the engine about its target: the touched files and whether the tree is
exactly the set applied (the statement verify makes before any gate runs).

Both questions are the engine's (``patchkit.patchset``): this module only asks them and turns the
answer into verify's terms, so the runner does not depend on how the engine finds the base.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.manifest import Manifest
from patchkit.verify.api import VerifyContext


@dataclass(frozen=True, kw_only=True)
class TargetCheck:
    """Whether the target is exactly the set applied to its base, as ``patchkit status`` sees it."""

    state: str  # status's state: "applied", "base", "partial", "drift" or "not-base"
    statement: str  # one line for people: what the tree is, relative to the set
    fix: str  # what makes the tree exact ("" when it is)
    allowed: bool = False  # not exact, verified anyway because the user passed --allow-drift

    @property
    def exact(self) -> bool:
        return self.state == "applied"


def base_of(root: Path, manifest: Manifest) -> str:
    """The base commit of the target (never the repository's root commit: upstream history sits below
    a git base); BadInput when the tree does not contain it."""
    from patchkit.git import open_repo
    from patchkit.patchset.base import base_commit_in

    found = base_commit_in(open_repo(root), manifest)
    if found is None:
        raise BadInput(f"{root} does not contain the base {manifest.base_label()}",
                       hint="pass --target with a tree made by `patchkit base fetch` and `patchkit apply`")
    return found


def touched_files(root: Path, base: str) -> tuple[str, ...]:
    """Tree-relative files that differ between ``base`` and the work tree, deletions excluded.

    Both applied commits and uncommitted edits count, plus untracked files that git does not ignore;
    bytecode (which any import of the tree writes) never does.
    """
    from patchkit.git import Repo

    repo = Repo(root)
    changed = repo.run_bytes("diff", "--name-only", "--no-renames", "--diff-filter=d", "-z", base, "--")[1]
    untracked = repo.run_bytes("ls-files", "--others", "--exclude-standard", "-z")[1]
    names = {name.decode("utf-8", "surrogateescape") for name in (changed + untracked).split(b"\0") if name}
    return tuple(sorted(p for p in names if "__pycache__/" not in f"/{p}" and not p.endswith((".pyc", ".pyo"))))


def inspect_target(ctx: VerifyContext) -> TargetCheck:
    """The status check, read-only (no journal recovery: verify never writes the target)."""
    from patchkit.git import open_repo
    from patchkit.patchset import status
    from patchkit.patchset.series import load_set

    pset = load_set(ctx.set_dir)
    repo = open_repo(ctx.root)
    state = status.inspect(repo, pset)
    names = [p.name for p in pset.patches]
    diffs = {p.name: p.diff for p in pset.patches}
    applied = tuple(
        status.AppliedCommit(c.commit, c.patch, c.set, c.patch in diffs and status.patch_matches(repo, c.commit,
                                                                                                 diffs[c.patch]))
        for c in state.applied
    )
    base_ok = state.base_commit is not None
    drift = tuple(status.drift_entries(repo, pset, state)) if base_ok else ()
    kind = status._state_name(base_ok, state, names, drift, applied)
    label, where = pset.manifest.label, f"--target {ctx.root}"
    if kind == "applied":
        return TargetCheck(state=kind, statement=f"{ctx.root} is exactly {label} applied to its base", fix="")
    if kind in ("base", "not-base"):
        statement = f"{ctx.root} is not patched by {label}"
        fix = f"run `patchkit apply {where}`" if kind == "base" else "run `patchkit base fetch` and `patchkit apply`"
        return TargetCheck(state=kind, statement=statement, fix=fix)
    shown = ", ".join(f"{e.path} ({e.reason})" for e in drift[:5]) + (" ..." if len(drift) > 5 else "")
    what = "partly patched by" if kind == "partial" else "not exactly"
    return TargetCheck(state=kind, statement=f"{ctx.root} is {what} {label} applied: {shown}",
                       fix=f"reset the tree to its base and run `patchkit apply {where}`, or commit the changes "
                           "and run `patchkit refresh` to keep them in the set")


def check_target(ctx: VerifyContext, *, allow_drift: bool) -> TargetCheck:
    """The target check, refusing a tree that is not exactly the set applied unless ``allow_drift``."""
    found = inspect_target(ctx)
    if found.exact:
        return found
    if not allow_drift:
        raise BadInput(found.statement, hint=f"{found.fix}; or pass --allow-drift to verify it as it is")
    return TargetCheck(state=found.state, statement=found.statement, fix=found.fix, allowed=True)
