"""Human output of the patch-set engine's commands: base fetch, apply, status, refresh, lock."""

from __future__ import annotations

import os
import textwrap

from rich.text import Text

from patchkit.patchset.apply import ApplyResult
from patchkit.patchset.base import BaseResult
from patchkit.patchset.clean import CleanResult
from patchkit.patchset.lock import LockResult
from patchkit.patchset.refresh import RefreshResult
from patchkit.patchset.selfcontained import CopySetResult
from patchkit.patchset.sets import SetsResult, describe
from patchkit.patchset.status import StatusResult
from patchkit.render import QUIET, human, out, say, table


@human.register
def _base(result: BaseResult, verbosity: int = 0) -> None:
    how = "reused" if result.cached else ("created (wheel downloaded)" if result.downloaded else "created")
    say(f"base {how}: {result.path}")
    if verbosity > QUIET:
        say(f"  commit {result.commit}  tree {result.tree}  ({result.kind})")
        if result.wheel:
            say(f"  wheel {result.wheel}  sha256 {result.wheel_sha256}")


@human.register
def _apply(result: ApplyResult, verbosity: int = 0) -> None:
    if result.recovered:
        say(f"recovery: {result.recovered}")
    if result.state == "conflict" and result.conflict:
        _conflict(result)
        return
    if result.state == "drift":
        say(f"DRIFT: {result.target} is not exactly {result.set} applied to its base; nothing was changed")
        for entry in result.drift:
            say(f"  {entry.reason:<28} {entry.path}")
        say(f"  to fix: {result.fix}")
        return
    headline = {
        "applied": f"applied {len(result.patches)} patches of {result.set} to {result.target}",
        "already-applied": f"already applied: {result.set} is fully applied to {result.target}; nothing to do",
        "dry-run": f"dry run: all {len(result.patches)} patches of {result.set} apply cleanly; nothing was changed",
    }[result.state]
    say(headline)
    if verbosity > QUIET:
        for patch in result.patches:
            say(f"  ok  {patch.patch}  {(patch.commit or '')[:12]}  {patch.subject}")


def _conflict(result: ApplyResult) -> None:
    conflict = result.conflict
    assert conflict is not None
    where = f"{conflict.file}:{conflict.line}" if conflict.line else conflict.file
    hunk = f", hunk {conflict.hunk}" if conflict.hunk else ""
    say(f"CONFLICT: {conflict.patch}{hunk} does not apply at {where}")
    say(f"  the target was not changed (still at {result.head_before[:12]})")
    if conflict.expected or conflict.actual:
        shown = table("expected by the patch", "in the tree")
        for i in range(max(len(conflict.expected), len(conflict.actual))):
            want = conflict.expected[i] if i < len(conflict.expected) else ""
            have = conflict.actual[i] if i < len(conflict.actual) else ""
            shown.add_row(Text(("  " if want == have else "! ") + want), Text(have))  # Text: code is not markup
        out().print(shown)
    if conflict.git_error:
        say("git apply said:\n  " + conflict.git_error.replace("\n", "\n  "))


@human.register
def _status(result: StatusResult, verbosity: int = 0) -> None:
    say(f"{result.target}: {result.state}  (set {result.set})")
    if result.journal:
        say(f"  recovery: {result.journal}")
    say(f"  base: {'ok ' + (result.base_commit or '')[:12] if result.base_ok else 'NOT the pinned base'}")
    if result.state == "base":
        say(f"  not applied: the pinned base, unpatched; `patchkit apply` applies the {len(result.missing)} patches")
        say(f"  to fix: {result.fix}")
        return
    for commit in result.applied:
        mark = "ok" if commit.matches else "DIFFERS"
        say(f"  applied  {commit.patch}  {commit.commit[:12]}  {mark}")
    for name in result.missing:
        say(f"  missing  {name}")
    for entry in result.drift:
        if entry.reason != "not applied":  # listed as missing just above
            say(f"  drift    {entry.reason:<28} {entry.path}")
    if result.fix:
        say(f"  to fix: {result.fix}")


@human.register
def _refresh(result: RefreshResult, verbosity: int = 0) -> None:
    """Per patch what changed, then exactly which files were written (or that nothing was)."""
    if result.recovered:
        say(f"recovery: {result.recovered}")
    for change in result.changes:
        loud = "  CONTEXT CHANGED" if change.context_changed else ""
        counts = f" (+{change.added}/-{change.removed} lines)" if change.added or change.removed else ""
        detail = f" - {change.detail}" if change.detail else ""
        if verbosity > QUIET or change.status != "unchanged" or change.context_changed:
            say(f"  {change.status:<26} {change.patch}{counts}{loud}{detail}")
    if result.state == "blocked":
        say("NOT written: a patch's context changed; review it, then re-run with --accept-context")
    elif result.state == "unchanged":
        say(f"nothing changed: {result.set} already matches the commits of {result.target}")
    else:
        wrote = f"wrote {', '.join(result.files_written)}" if result.files_written else ""
        removed = f"removed {', '.join(result.files_removed)}" if result.files_removed else ""
        say(f"refreshed {result.set}: {'; '.join(part for part in (wrote, removed) if part)}")
    if result.head_before != result.head_after:
        say(f"  {result.target}: its commits are now the ones `patchkit apply` makes from the set (same files, "
            f"trailers naming each patch): {result.head_before[:12]} -> {result.head_after[:12]}")


@human.register
def _lock(result: LockResult, verbosity: int = 0) -> None:
    what = "updated" if result.changed else "already up to date"
    say(f"lock {what}: {result.set}, base tree {result.base_tree}, {len(result.patches)} patches, "
        f"{result.post_image_files} post-image files")


@human.register
def _sets(result: SetsResult, verbosity: int = 0) -> None:
    if not result.sets:
        say("no patch sets found")
        return
    if not out().is_terminal:  # a pipe or a log: a listing that fits PIPE_WIDTH, not a 200-column table
        _sets_listing(result)
        return
    shown = table("set", "version", "base", "python", "proven on", "default")
    for row in result.sets:
        proven = "\n".join([*describe(row.proven), *([row.caveat] if row.caveat else [])])
        shown.add_row(Text(row.name), Text(row.label), Text(row.base), Text(", ".join(row.python)), Text(proven),
                      "yes" if row.default else "")
    out().print(shown)
    say(f"in {result.root}; without --set every command takes {result.default} (--set NAME or --set DIR for another)")


#: The width of ``patchkit sets`` written to a pipe or a file (COLUMNS, when set, decides).
PIPE_WIDTH = 100


def _sets_listing(result: SetsResult) -> None:
    """One line per set (name, version, base, Pythons, default), then its proofs, indented and wrapped."""
    width = int(os.environ.get("COLUMNS") or PIPE_WIDTH)
    for row in result.sets:
        say(f"{row.name}  {row.label}  {row.base}  python {', '.join(row.python)}" + ("  (default)" if row.default
                                                                                     else ""))
        for line in [*describe(row.proven), *([row.caveat] if row.caveat else [])]:
            say(textwrap.fill(line, width=width, initial_indent="    ", subsequent_indent="      "))
    say(textwrap.fill(f"in {result.root}; without --set every command takes {result.default} (--set NAME or "
                      "--set DIR for another)", width=width))


def _size(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"


_KIND_NAMES = {"tree": "trees", "env": "environments", "wheel": "wheels", "gate-results": "gate results",
               "other": "other cached files"}


@human.register
def _clean(result: CleanResult, verbosity: int = 0) -> None:
    for item in result.items:
        reason = f"  ({item.reason})" if item.reason else ""
        say(f"  {item.action:<12} {item.kind:<12} {_size(item.size):>9}  {item.path}{reason}")
    if result.dry_run:
        _clean_kinds(result)
    if not result.items:
        say(f"nothing to clean (home {result.home}, cache {result.cache})")
        return
    verb = "would free" if result.dry_run else "freed"
    kept = sum(1 for i in result.items if i.action == "kept")
    say(f"{verb} {_size(result.freed)}" + (f"; kept {kept} (see the reasons above)" if kept else ""))


def _clean_kinds(result: CleanResult) -> None:
    """Per kind: how many, how big, and whether this run removes it or which option would."""
    shown = table("kind", "items", "size", "this run", title="on disk", right=("items", "size"))
    for total in result.kinds:
        verb = "would remove" if total.selected else f"kept (remove with {total.option})"
        shown.add_row(_KIND_NAMES[total.kind], str(total.count), _size(total.size), verb if total.count else "-")
    out().print(shown)


from patchkit.render import port as _port  # noqa: E402,F401  (registers the port renderer: same area)


@human.register
def _copy_set(result: CopySetResult, verbosity: int = 0) -> None:
    say(f"copied {result.source} to {result.dest}")
    for old, new in result.copied:
        say(f"  {old} -> {new} (the manifest names the copy's own folder)")
