"""``patchkit port``'s output: the rich view for people and the markdown report written beside the set.

The markdown names no machine path and no timing (it is committed with the set); everything in it
is also in the ``--json`` result. :mod:`patchkit.render.patchset` imports this module, which
registers the human renderer of :class:`~patchkit.patchset.port.PortResult`.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text

from patchkit.patchset.drift import (
    DispatchDrift,
    PatchDrift,
    PatchStatus,
    PortReport,
    SiteChange,
    UpstreamFile,
    UpstreamHunk,
)
from patchkit.patchset.port import REPORT_NAME, PortResult
from patchkit.render import QUIET, human, out, say, table

_STYLE: dict[str, str] = {
    "clean": "green", "offset": "cyan", "context-changed": "yellow", "already-upstream": "blue",
    "conflict": "red", "target-gone": "red",
}
#: Range-diff lines shown per patch on the terminal (the markdown and --json have all of them).
_RANGE_DIFF_LINES = 40
#: Silent upstream hunks listed per file on the terminal and in the markdown (--json has all).
_HUNKS_SHOWN = 25
#: Dispatch-site changes listed on the terminal.
_SITES_SHOWN = 15


# ---------------------------------------------------------------------- shared wording
def status_text(patch: PatchDrift) -> str:
    if patch.resolution:
        return f"{patch.status} ({patch.resolution})"
    return patch.status


def moves_text(patch: PatchDrift) -> str:
    moved = [m for m in patch.moves if m.delta]
    if not patch.moves:
        return "-"
    if not moved:
        return "none"
    deltas = sorted({m.delta for m in moved})
    shown = ", ".join(f"{d:+d}" for d in deltas[:6]) + (" ..." if len(deltas) > 6 else "")
    return f"{len(moved)}/{len(patch.moves)} hunks by {shown}"


def headline(result: PortResult) -> str:
    report = result.report
    route = f"{report.set}: {report.old_base.label} -> {report.new_base.label}" if report else result.src
    if result.state == "ported":
        return f"ported {route}"
    if result.state == "aborted":
        return f"aborted the port of {result.src}; nothing else was changed"
    assert result.stopped is not None
    return f"STOPPED porting {route} at {result.stopped.patch}: {result.stopped.status}"


def _site_line(change: SiteChange) -> str:
    where = f"{change.file}:{change.line}" if change.line else change.file
    declared = " [declared]" if change.declared else ""
    if change.kind == "changed":
        return f"{where} {change.scope}: `{change.old_expr}` -> `{change.expr}`{declared}"
    return f"{where} {change.scope}: `{change.expr}`{declared}"


def _section(hunk: UpstreamHunk) -> str:
    """The hunk's enclosing definition; git's Python driver finds none above the first def or class."""
    return hunk.section or "(module level, before the first def or class)"


def _upstream_totals(files: Iterable[UpstreamFile]) -> tuple[int, int, int]:
    files = list(files)
    return len(files), sum(len(f.hunks) for f in files), sum(len(f.silent) for f in files)


# ---------------------------------------------------------------------- rich
@human.register
def _port(result: PortResult, verbosity: int = 0) -> None:
    if result.recovered:
        say(f"recovery: {result.recovered}")
    say(headline(result))
    report = result.report
    if report is None:
        return
    out().print(_patch_table(report))
    for name in report.pending:
        say(f"  not replayed yet: {name}")
    if verbosity > QUIET:
        _human_range_diffs(report)
        _human_upstream(report)
        _human_dispatch(report.dispatch)
        for number, line in report.stale_mentions:
            say(f"manifest.toml:{number} still names the old base: {line}")
    if result.stopped:
        _human_stop(result)
    elif result.state == "ported":
        say(f"new set written: {result.out} (with {REPORT_NAME}); next: `patchkit apply --set {result.out}` "
            f"and `patchkit verify`")
    if result.timings and verbosity > QUIET:
        say("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items()))


def _human_range_diffs(report: PortReport) -> None:
    for patch in report.patches:
        if patch.status in ("clean", "offset", "already-upstream") or not patch.range_diff:
            continue
        lines = patch.range_diff.splitlines()
        say(f"range-diff of {patch.patch} (old vs new):")
        say("  " + "\n  ".join(lines[:_RANGE_DIFF_LINES]))
        if len(lines) > _RANGE_DIFF_LINES:
            say(f"  ... {len(lines) - _RANGE_DIFF_LINES} more lines in --json and {REPORT_NAME}")


def _human_stop(result: PortResult) -> None:
    stop = result.stopped
    assert stop is not None
    say(f"\n{stop.patch}: {stop.status} in {', '.join(stop.files) or '?'}")
    if stop.messages:
        say("  " + stop.messages.replace("\n", "\n  "))
    say(f"the work tree is {stop.tree} (nothing outside the port's work dir was changed):")
    say("  resolve the files there, `git add` and `git commit` them, then `patchkit port --continue`;")
    say("  `patchkit port --skip` drops this patch, `patchkit port --abort` drops the whole port")


def _patch_table(report: PortReport) -> Table:
    title = f"{len(report.patches)} of {len(report.patches) + len(report.pending)} patches replayed"
    shown = table("patch", "status", "hunks moved", "detail", title=title)
    for patch in report.patches:
        shown.add_row(Text(patch.patch), Text(status_text(patch), style=_STYLE.get(patch.status, "")),
                      Text(moves_text(patch)), Text(patch.detail))
    return shown


def _human_upstream(report: PortReport) -> None:
    count, hunks, silent = _upstream_totals(report.upstream)
    say(f"the new base changed {count} of the set's files: {hunks} hunks, {silent} of them in lines the set "
        "does not touch (where a patch can go wrong silently)")
    for item in report.upstream:
        say(f"  {item.path}: {item.change}, +{item.added}/-{item.removed}, {len(item.hunks)} hunks, "
            f"{len(item.silent)} silent")
        for hunk in item.silent[:5]:
            say(f"    old {hunk.old_start},{hunk.old_count} -> new {hunk.new_start},{hunk.new_count}  {_section(hunk)}")
        if len(item.silent) > 5:
            say(f"    ... {len(item.silent) - 5} more in --json and {REPORT_NAME}")


def _human_dispatch(dispatch: DispatchDrift | None) -> None:
    if dispatch is None:
        say("dispatch sites: not scanned")
        return
    say(f"dispatch sites: {dispatch.old_sites} on the old base, {dispatch.new_sites} on the new: "
        f"{dispatch.count('appeared')} appeared, {dispatch.count('vanished')} vanished, "
        f"{dispatch.count('changed')} changed")
    for change in dispatch.changes[:_SITES_SHOWN]:
        say(f"  {change.kind:<9} {_site_line(change)}")
    if len(dispatch.changes) > _SITES_SHOWN:
        say(f"  ... {len(dispatch.changes) - _SITES_SHOWN} more in --json and {REPORT_NAME}")
    if dispatch.changes:
        say("  review them: `patchkit dispatch-sites` on the patched new tree rewrites the declarations")


# ---------------------------------------------------------------------- markdown
def markdown(report: PortReport) -> str:
    """The drift report as a markdown document (deterministic: no paths, no timings)."""
    out = [f"# Port of {report.set} to {report.new_base.label}", ""]
    out += [f"Made by `patchkit port`: the set {report.set} (on {report.old_base.label}) replayed patch by "
            f"patch on {report.new_base.label} with git's 3-way merge (no fuzz), written as {report.new_set}.", ""]
    out += ["| | base | commit | tree |", "|---|---|---|---|",
            f"| old | {report.old_base.label} | `{report.old_base.commit}` | `{report.old_base.tree}` |",
            f"| new | {report.new_base.label} | `{report.new_base.commit}` | `{report.new_base.tree}` |", ""]
    out += _md_patches(report)
    out += _md_upstream(report.upstream)
    out += _md_dispatch(report.dispatch)
    if report.stale_mentions:
        out += ["## The manifest still names the old base", ""]
        out += [f"- line {number}: `{line}`" for number, line in report.stale_mentions] + [""]
    return "\n".join(out).rstrip("\n") + "\n"


_STATUS_MEANING: dict[PatchStatus, str] = {
    "clean": "the same hunks at the same lines",
    "offset": "the same hunks, moved",
    "context-changed": "merged, but the hunks' context or grouping changed (or their +/- lines)",
    "conflict": "the 3-way merge conflicted; resolved by hand",
    "already-upstream": "the new base already has the change; dropped",
    "target-gone": "a file it edits is not in the new base; resolved by hand",
}


def _md_patches(report: PortReport) -> list[str]:
    out = ["## Patches", "", "| patch | status | hunks moved | new patch | notes |", "|---|---|---|---|---|"]
    for patch in report.patches:
        new = ", ".join(f"`{n}`" for n in patch.new_patches) or "-"
        out.append(f"| `{patch.patch}` | {status_text(patch)} | {moves_text(patch)} | {new} | "
                   f"{_md_cell(patch.detail)} |")
    out += [f"| `{name}` | not replayed yet | | | |" for name in report.pending]
    seen = sorted({p.status for p in report.patches})
    out += [""] + [f"- **{s}**: {_STATUS_MEANING[s]}" for s in seen] + [""]
    moved = [p for p in report.patches if any(m.delta for m in p.moves)]
    if moved:
        out += ["### Hunks that moved", "", "| patch | file | old line | new line | moved by |",
                "|---|---|---|---|---|"]
        out += [f"| `{p.patch}` | `{m.file}` | {m.old_line} | {m.new_line} | {m.delta:+d} |"
                for p in moved for m in p.moves if m.delta]
        out.append("")
    diffs = [p for p in report.patches if p.range_diff and p.status != "clean"]
    if diffs:
        out += ["### Range-diff, old patch vs new", ""]
        for patch in diffs:
            out += [f"<details><summary><code>{patch.patch}</code>: {status_text(patch)}</summary>", "", "```diff",
                    patch.range_diff, "```", "", "</details>", ""]
    return out


def _md_upstream(files: tuple[UpstreamFile, ...]) -> list[str]:
    count, hunks, silent = _upstream_totals(files)
    out = ["## What the new base changed in the set's files", "",
           f"{count} of the files the set edits changed upstream: {hunks} hunks, **{silent} of them in lines the set "
           "does not touch**. Those are where a patch can go wrong without any conflict: read them.", ""]
    if not files:
        return out
    out += ["| file | change | +/- | hunks | near the set | silent |", "|---|---|---|---|---|---|"]
    out += [f"| `{f.path}` | {f.change} | +{f.added}/-{f.removed} | {len(f.hunks)} | {len(f.hunks) - len(f.silent)} | "
            f"{len(f.silent)} |" for f in files]
    out.append("")
    for item in files:
        if not item.silent:
            continue
        out += [f"### `{item.path}`: silent hunks", "", "| old lines | new lines | in |", "|---|---|---|"]
        out += [f"| {h.old_start},{h.old_count} | {h.new_start},{h.new_count} | {_md_cell(_section(h))} |"
                for h in item.silent[:_HUNKS_SHOWN]]
        if len(item.silent) > _HUNKS_SHOWN:
            out.append(f"| ... | {len(item.silent) - _HUNKS_SHOWN} more | |")
        out.append("")
    return out


def _md_dispatch(dispatch: DispatchDrift | None) -> list[str]:
    out = ["## Dispatch sites", ""]
    if dispatch is None:
        return [*out, "Not scanned.", ""]
    where = f" (declared in `{dispatch.declarations}`)" if dispatch.declarations else ""
    out += [f"The dispatch gate's scanner found {dispatch.old_sites} sites on the old base and {dispatch.new_sites} on "
            f"the new: {dispatch.count('appeared')} appeared, {dispatch.count('vanished')} vanished, "
            f"{dispatch.count('changed')} changed. *declared* marks sites the set's declarations{where} name: a "
            "vanished or changed one is a stale declaration, an appeared one without the mark must be reviewed.", ""]
    if dispatch.changes:
        out += ["| change | file:line | scope | expression | declared |", "|---|---|---|---|---|"]
        for change in dispatch.changes:
            where_line = f"{change.file}:{change.line}" if change.line else change.file
            expr = f"`{change.old_expr}` -> `{change.expr}`" if change.kind == "changed" else f"`{change.expr}`"
            out.append(f"| {change.kind} | `{where_line}` | `{change.scope}` | {_md_cell(expr)} | "
                       f"{'yes' if change.declared else ''} |")
        out.append("")
    return out


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
