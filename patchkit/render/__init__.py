"""The only module that prints results: rich for people, a versioned JSON envelope for machines.

Add a human renderer for a new result type with ``@human.register(MyResult)``. Output is plain text
when stdout is not a terminal (rich detects that), so logs and pipes stay readable.
"""

from __future__ import annotations

import json
import sys
from functools import singledispatch
from typing import Any

from rich.console import Console
from rich.table import Table

from patchkit import JSON_SCHEMA_VERSION
from patchkit.errors import PatchkitError
from patchkit.results import CommandResult, to_jsonable

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def envelope(command: str, ok: bool, exit_code: int, **rest: Any) -> dict[str, Any]:
    """The ``--json`` envelope; tests pin its keys."""
    return {"patchkit": JSON_SCHEMA_VERSION, "command": command, "ok": ok, "exit_code": exit_code, **rest}


def emit(result: CommandResult, as_json: bool) -> None:
    if as_json:
        doc = envelope(result.command, result.ok, result.exit_code, result=result.payload())
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    else:
        human(result)


def emit_error(command: str, error: PatchkitError, as_json: bool, log_path: str | None = None) -> None:
    if as_json:
        loc = error.location
        doc = envelope(
            command,
            False,
            error.exit_code,
            error={
                "type": type(error).__name__,
                "message": error.message,
                "hint": error.hint,
                "file": loc.file if loc else None,
                "line": loc.line if loc else None,
                "log": log_path,
            },
        )
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    text = f"patchkit {command}: error: {error.one_line()}"
    if log_path:
        text += f"\n  details: {log_path}"
    stderr.print(text, markup=False)


def progress(description: str):
    """A transient spinner/progress context for long steps (download, multi-patch apply)."""
    return stderr.status(description)


@singledispatch
def human(result: CommandResult) -> None:
    """Fallback: a two-column table of the result's fields."""
    table = Table(title=f"patchkit {result.command}", show_header=False)
    for key, value in to_jsonable(result).items():
        table.add_row(str(key), json.dumps(value) if isinstance(value, (dict, list)) else str(value))
    stdout.print(table)


# ---------------------------------------------------------------- smoke

from rich.markup import escape  # noqa: E402

from patchkit.smoke.run import ServerRun, SmokeResult  # noqa: E402


class _SmokeStatus:
    """A rich spinner whose text may carry raw log lines (escaped, so brackets stay text)."""

    def __init__(self, status) -> None:
        self._status = status

    def update(self, text: str) -> None:
        self._status.update(escape(text[:160]))


class SmokeConsole:
    """The smoke run's live view on stderr: a spinner with the server's last log line, and notes."""

    def status(self, text: str):
        import contextlib

        @contextlib.contextmanager
        def spinner():
            with stderr.status(escape(text)) as status:
                yield _SmokeStatus(status)

        return spinner()

    def note(self, text: str) -> None:
        stderr.print(text, markup=False)


def _fmt(value: float | None, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def _smoke_preflight(result: SmokeResult) -> None:
    table = Table(title=f"preflight ({result.set_id}, --gpus {result.gpus})", show_header=False)
    for check in result.preflight.checks:
        table.add_row(check.name, "ok" if check.ok else "FAILED", check.detail)
    stdout.print(table)


def _smoke_servers(servers: tuple[ServerRun, ...]) -> None:
    table = Table(title="servers")
    for column in ("server", "ready", "tokens/s", "TTFT", "accept length", "verify steps", "teardown"):
        table.add_column(column)
    for run in servers:
        stats, down = run.stats, run.teardown
        ending = "SIGKILL" if down.sigkill_sent else "SIGTERM"
        ending += ", clean" if down.clean else f", LEFT {list(down.leftover_pids)}"
        table.add_row(run.role, _fmt(run.ready_s, ".1f") + ("s" if run.ready_s is not None else ""),
                      _fmt(stats.tokens_per_s if stats.prompts else None, ".1f"),
                      _fmt(stats.ttft_s * 1000 if stats.prompts else None, ".0f") + (" ms" if stats.prompts else ""),
                      _fmt(stats.accept_length, ".2f"), _fmt(stats.verify_ct, "d"), ending)
    stdout.print(table)
    for run in servers:
        if run.failure:
            stdout.print(f"{run.role} server failed: {run.failure}\n  log: {run.log}", markup=False)
            if run.log_tail:
                stdout.print("  last log lines:\n    " + run.log_tail.replace("\n", "\n    "), markup=False)


def _smoke_prompts(result: SmokeResult) -> None:
    table = Table(title="baseline vs DDTREE (greedy)")
    for column in ("prompt", "result", "tokens", "first mismatch", "baseline from there", "DDTREE from there"):
        table.add_column(column)
    for item in result.prompts:
        table.add_row(item.prompt_id, "identical" if item.matched else "MISMATCH",
                      f"{item.baseline_tokens}/{item.ddtree_tokens}", _fmt(item.first_mismatch, "d"),
                      " ".join(map(str, item.baseline_continuation)), " ".join(map(str, item.ddtree_continuation)))
    stdout.print(table)
    if result.skipped_prompts:
        stdout.print(f"skipped (text prompts, server has no tokenizer): {', '.join(result.skipped_prompts)}",
                     markup=False)


@human.register(SmokeResult)
def _human_smoke(result: SmokeResult) -> None:
    _smoke_preflight(result)
    if result.preflight_only:
        verdict = "passed" if result.ok else "FAILED"
        stdout.print(f"smoke: preflight {verdict} (nothing started)", markup=False)
        return
    _smoke_servers(result.servers)
    if result.prompts:
        _smoke_prompts(result)
    matched = sum(p.matched for p in result.prompts)
    verdict = "PASS" if result.ok else "FAIL"
    speed = f", DDTREE at {result.speedup:.2f}x baseline tokens/s" if result.speedup else ""
    stdout.print(f"smoke: {verdict}: {matched}/{len(result.prompts)} prompts identical, "
                 f"{result.mismatches} mismatched{speed}; logs in {result.logs}", markup=False)


# ---------------------------------------------------------------- bundle

from patchkit.hostprep.bundle import BundleResult  # noqa: E402


@human.register(BundleResult)
def _human_bundle(result: BundleResult) -> None:
    profile = f", profile {result.profile}" if result.profile else ""
    table = Table(title=f"bundle for Python {result.python_version} on {', '.join(result.platforms)}{profile}")
    for column in ("wheel", "size", "sha256", "slimmed"):
        table.add_column(column)
    for wheel in result.wheels:
        slim = ""
        if wheel.dropped_members:
            slim = f"{len(wheel.dropped_members)} members dropped (was {_megabytes(wheel.original_size or 0)})"
        table.add_row(f"{wheel.name}=={wheel.version}", _megabytes(wheel.size), wheel.sha256[:16] + "…", slim)
    stdout.print(table)
    total = sum(wheel.size for wheel in result.wheels)
    stdout.print(f"{len(result.wheels)} wheels, {_megabytes(total)}", markup=False)
    for wheel in result.wheels:
        if wheel.unmatched_globs:
            stdout.print(f"warning: {wheel.name}: slim globs matched nothing (changed wheel?): "
                         f"{', '.join(wheel.unmatched_globs)}", markup=False)
    if result.skipped_host_packages:
        stdout.print(f"already on the host (not bundled): {', '.join(result.skipped_host_packages)}", markup=False)
    if result.shadowed_host_packages:
        stdout.print(f"host versions overruled (bundled, shadow the host's via PYTHONPATH): "
                     f"{', '.join(result.shadowed_host_packages)}", markup=False)
    if result.excluded:
        stdout.print(f"excluded: {', '.join(result.excluded)}", markup=False)
    source = result.source_tree
    if source and source.on_host:
        stdout.print(f"sglang's source does not travel: the host's patched tree ({source.files} files in python/, "
                     f"git tree {source.tree_id}) is install.sh's third argument; {source.reason}", markup=False)
    elif source:
        stdout.print(f"sglang travels as the patched tree's {source.path}/ "
                     f"({source.files} files), not as a wheel: {source.reason}", markup=False)
    stdout.print(f"copy {result.out} to the host, then run there: {result.install_command} "
                 f"(inside {result.out.name}/); it prints the export PYTHONPATH line", markup=False)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


# ---------------------------------------------------------------- patch sets (core): base, apply, status, refresh, lock
from collections.abc import Callable  # noqa: E402

from rich.text import Text  # noqa: E402

from patchkit.patchset.apply import ApplyResult  # noqa: E402
from patchkit.patchset.base import BaseResult  # noqa: E402
from patchkit.patchset.lock import LockResult  # noqa: E402
from patchkit.patchset.refresh import RefreshResult  # noqa: E402
from patchkit.patchset.status import StatusResult  # noqa: E402


def with_progress(description: str, core: Callable[[Callable[[str], None]], Any]) -> Any:
    """Run ``core(progress)`` under a transient status line on stderr; ``progress(text)`` updates it."""
    with progress(description) as status:
        return core(lambda text: status.update(text))


def _say(text: str) -> None:
    stdout.print(text, markup=False)


@human.register
def _base(result: BaseResult) -> None:
    how = "reused" if result.cached else ("created (wheel downloaded)" if result.downloaded else "created")
    _say(f"base {how}: {result.path}")
    _say(f"  commit {result.commit}  tree {result.tree}  ({result.kind})")
    if result.wheel:
        _say(f"  wheel {result.wheel}  sha256 {result.wheel_sha256}")


@human.register
def _apply(result: ApplyResult) -> None:
    if result.recovered:
        _say(f"recovery: {result.recovered}")
    if result.state == "conflict" and result.conflict:
        _conflict(result)
        return
    if result.state == "drift":
        _say(f"DRIFT: {result.target} is not exactly {result.set} applied to its base; nothing was changed")
        for entry in result.drift:
            _say(f"  {entry.reason:<28} {entry.path}")
        _say("  (reset the tree to its base and re-run `patchkit apply`, or use `patchkit refresh` to keep edits)")
        return
    headline = {
        "applied": f"applied {len(result.patches)} patches of {result.set} to {result.target}",
        "already-applied": f"already applied: {result.set} is fully applied to {result.target}; nothing to do",
        "dry-run": f"dry run: all {len(result.patches)} patches of {result.set} apply cleanly; nothing was changed",
    }[result.state]
    _say(headline)
    for patch in result.patches:
        _say(f"  ok  {patch.patch}  {(patch.commit or '')[:12]}  {patch.subject}")


def _conflict(result: ApplyResult) -> None:
    conflict = result.conflict
    assert conflict is not None
    where = f"{conflict.file}:{conflict.line}" if conflict.line else conflict.file
    hunk = f", hunk {conflict.hunk}" if conflict.hunk else ""
    _say(f"CONFLICT: {conflict.patch}{hunk} does not apply at {where}")
    _say(f"  the target was not changed (still at {result.head_before[:12]})")
    if conflict.expected or conflict.actual:
        table = Table("expected by the patch", "in the tree", show_lines=False)
        for i in range(max(len(conflict.expected), len(conflict.actual))):
            want = conflict.expected[i] if i < len(conflict.expected) else ""
            have = conflict.actual[i] if i < len(conflict.actual) else ""
            table.add_row(Text(("  " if want == have else "! ") + want), Text(have))  # Text: code is not markup
        stdout.print(table)
    if conflict.git_error:
        _say("git apply said:\n  " + conflict.git_error.replace("\n", "\n  "))


@human.register
def _status(result: StatusResult) -> None:
    _say(f"{result.target}: {result.state}  (set {result.set})")
    if result.journal:
        _say(f"  recovery: {result.journal}")
    _say(f"  base: {'ok ' + (result.base_commit or '')[:12] if result.base_ok else 'NOT the pinned base'}")
    for commit in result.applied:
        mark = "ok" if commit.matches else "DIFFERS"
        _say(f"  applied  {commit.patch}  {commit.commit[:12]}  {mark}")
    for name in result.missing:
        _say(f"  missing  {name}")
    for entry in result.drift:
        _say(f"  drift    {entry.reason:<28} {entry.path}")


@human.register
def _refresh(result: RefreshResult) -> None:
    for change in result.changes:
        loud = "  CONTEXT CHANGED" if change.context_changed else ""
        counts = f" (+{change.added}/-{change.removed} lines)" if change.added or change.removed else ""
        _say(f"  {change.status:<26} {change.patch}{counts}{loud}{' - ' + change.detail if change.detail else ''}")
    if result.written:
        _say(f"refreshed {result.set} (series, patches and lock written)")
    else:
        _say("NOT written: a patch's context changed; review it, then re-run with --accept-context")


@human.register
def _lock(result: LockResult) -> None:
    what = "updated" if result.changed else "already up to date"
    _say(f"lock {what}: {result.set}, base tree {result.base_tree}, {len(result.patches)} patches, "
         f"{result.post_image_files} post-image files")
# ---------------------------------------------------------------- verify (gates)


_STATUS_STYLE = {"pass": "green", "fail": "red", "crash": "bold magenta"}
_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


def _verify_summary(result: Any) -> Table:
    table = Table(title=f"patchkit verify: {len(result.touched)} touched file(s)")
    for column in ("gate", "status", "errors", "warnings", "info", "seconds"):
        table.add_column(column, justify="right" if column in ("errors", "warnings", "info", "seconds") else "left")
    for run in result.gates:
        style = _STATUS_STYLE[run.status.value]
        counts = [str(sum(1 for f in run.findings if f.severity.value == s)) for s in ("error", "warning", "info")]
        table.add_row(run.gate, f"[{style}]{run.status.value}[/]", *counts, f"{run.seconds:.2f}")
    return table


def _verify_finding_line(finding: Any) -> str:
    """``severity gate file:line: message`` (one line per finding: grep- and editor-friendly)."""
    where = f"{finding.file}:{finding.line}" if finding.line else finding.file
    style = _SEVERITY_STYLE[finding.severity.value]
    text = f"[{style}]{finding.severity.value:<7}[/] {finding.gate:<8} {escape(where)}: {escape(finding.message)}"
    return text + (f"\n         [dim]hint: {escape(finding.hint)}[/]" if finding.hint else "")


def verify_human(result: Any) -> None:
    """Summary table, then every finding, then crash tracebacks and the closing verdict."""
    stdout.print(_verify_summary(result))
    for finding in result.findings():
        stdout.print(_verify_finding_line(finding))
    for run in result.gates:
        if run.traceback:
            stdout.print(f"[bold magenta]gate {run.gate} crashed:[/]")
            stdout.print(run.traceback.rstrip(), markup=False)
    if result.unavailable:
        stdout.print(f"[yellow]not in this checkout (not run): {', '.join(result.unavailable)}[/]")
    if result.junit:
        stdout.print(f"JUnit report: {escape(result.junit)}")
    verdict = {0: "[green]all gates passed[/]", 1: "[red]findings: verification failed[/]", 3: "[bold magenta]a gate crashed[/]"}
    stdout.print(f"{verdict.get(result.exit_code, result.exit_code)} in {result.seconds:.2f} s")


def _register_verify() -> None:
    from patchkit.verify.run import VerifyResult

    human.register(VerifyResult)(verify_human)


_register_verify()


# ---------------------------------------------------------------- symbols (xref's symbol table)

from patchkit.verify.run import SymbolsResult  # noqa: E402


@human.register
def _symbols(result: SymbolsResult) -> None:
    """One block per name (defined / imported / used, with file:line), readable in CI logs too."""
    from checks.xref import format_symbol_table  # lazy: loads libcst

    stdout.print(f"symbol family {result.family!r}: {len(result.symbols)} names", markup=False)
    stdout.print(format_symbol_table(list(result.symbols)), markup=False, soft_wrap=True)


# ---------------------------------------------------------------- bench (its renderer is render/bench.py)


def with_byte_progress(description: str, core: Callable[[Callable[[int, int, str], None], Callable[[str], None]], Any]) -> Any:
    """Run ``core(progress, announce)`` under a byte progress bar on stderr (``patchkit testmodels --shape``)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task(description, total=None)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=escape(what[-60:]))

        return core(progress, lambda text: stderr.print(text, markup=False))


def _register_bench() -> None:
    from patchkit.bench.run import BenchResult
    from patchkit.render.bench import render_bench

    human.register(BenchResult)(lambda result: render_bench(result, stdout, human))


_register_bench()
