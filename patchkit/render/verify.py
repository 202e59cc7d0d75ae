"""Human output of the verify commands: the live view while gates run, then the gate table, the
findings and the verdict; the symbol table; the dispatch declarations update."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.table import Table

from patchkit.render import NORMAL, QUIET, SILENCE_S, VERBOSE, Heartbeat, err, human, out, say, table
from patchkit.verify.api import Finding, Severity
from patchkit.verify.outcome import GateRun, VerifyResult
from patchkit.verify.run import DispatchSitesResult, SymbolsResult

_STATUS_STYLE = {"pass": "green", "fail": "red", "crash": "bold magenta"}
_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}
_COUNTED = (Severity.ERROR, Severity.WARNING, Severity.INFO)
#: What a gate is doing while it runs, for the lines of a piped run.
GATE_DOING = {
    "compile": "compiling the touched files",
    "imports": "importing every touched module in the verify environment",
    "xref": "cross-referencing the set's names",
    "calls": "checking the calls into changed code",
    "dispatch": "scanning the dispatch sites",
    "backend": "running ServerArgs for every backend case",
    "tests": "running the set's tests (pytest)",
}


def _gate_table(runs: tuple[GateRun, ...] | list[GateRun], title: str | None) -> Table:
    shown = table("gate", "status", "errors", "warnings", "info", "seconds", title=title,
                  right=("errors", "warnings", "info", "seconds"))
    for run in runs:
        status = f"[{_STATUS_STYLE[run.status]}]{run.status}[/]"
        shown.add_row(run.gate, status, *(str(run.count(s)) for s in _COUNTED), f"{run.seconds:.2f}")
    return shown


def _row_line(run: GateRun, index: int, total: int) -> str:
    counts = ", ".join(f"{run.count(s)} {s.value}" for s in _COUNTED)
    reused = ", the pass of an earlier run on the same inputs" if run.reused else ""
    return f"verify: {run.gate} {run.status} ({index}/{total}, {run.seconds:.2f} s{reused}; {counts})"


class VerifyView:
    """The runner's progress (a :class:`patchkit.verify.run.GateProgress`) on stderr.

    On a terminal: a transient live table of the finished gates and a spinner naming the running gate
    and its current slow step. Elsewhere (CI logs): one line per finished gate, and the slow steps
    (pip's lines only with --verbose). Nothing with --quiet. Used as a context manager around the run.
    """

    def __init__(self, verbosity: int = NORMAL, every_s: float = SILENCE_S) -> None:
        self.verbosity = verbosity
        self.live = err().is_terminal and verbosity > QUIET
        self._beat = Heartbeat(every_s) if not self.live and verbosity > QUIET else None
        self._runs: list[GateRun] = []
        self._running = "preparing"
        self._note = ""
        self._display: Live | None = None

    def __enter__(self) -> VerifyView:
        if self.live:
            self._display = Live(self._render(), console=err(), transient=True, refresh_per_second=8)
            self._display.__enter__()
        if self._beat is not None:
            self._beat.__enter__()
            self._beat.doing("verify: preparing (the target check)")
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._display is not None:
            self._display.__exit__(kind, value, trace)
        if self._beat is not None:
            self._beat.__exit__(kind, value, trace)

    def _render(self) -> Group:
        text = escape(self._running + (f": {self._note}" if self._note else ""))
        parts: list[Any] = [_gate_table(self._runs, None)] if self._runs else []
        return Group(*parts, Spinner("dots", text=text))

    def _refresh(self) -> None:
        if self._display is not None:
            self._display.update(self._render())

    def _line(self, text: str) -> None:
        if self._beat is not None:
            self._beat.line(text)

    def note(self, text: str) -> None:
        self._note = text[:150]
        self._refresh()
        if self._beat is not None:
            self._beat.note(text)
        # pip's lines and pytest's counts come many a second: --verbose prints each, the default the
        # latest one every few seconds (the heartbeat)
        if self.verbosity >= VERBOSE or not text.startswith(("[verify.env] ", "set tests: ")):
            self._line(f"verify: {text}")

    def started(self, gate: str, index: int, total: int) -> None:
        self._running, self._note = f"running {gate} ({index}/{total})", ""
        self._refresh()
        if self._beat is not None:
            self._beat.doing(f"verify: {gate} ({index}/{total}) {GATE_DOING.get(gate, 'running')}")

    def finished(self, run: GateRun, index: int, total: int) -> None:
        self._runs.append(run)
        self._refresh()
        self._line(_row_line(run, index, total))


def _finding_line(finding: Finding) -> str:
    """``severity gate file:line: message`` (one line per finding: grep- and editor-friendly)."""
    where = f"{finding.file}:{finding.line}" if finding.line else finding.file
    style = _SEVERITY_STYLE[finding.severity.value]
    text = f"[{style}]{finding.severity.value:<7}[/] {finding.gate:<8} {escape(where)}: {escape(finding.message)}"
    return text + (f"\n         [dim]hint: {escape(finding.hint)}[/]" if finding.hint else "")


def _target_line(result: VerifyResult) -> str | None:
    check = result.target_check
    if check.exact:
        return f"target: {check.statement}"
    return f"[yellow]target: {escape(check.statement)}; verified as it is (--allow-drift)[/]"


def _findings(result: VerifyResult, verbosity: int) -> None:
    shown = [f for f in result.findings() if verbosity >= VERBOSE or f.severity != Severity.INFO]
    for finding in shown:
        out().print(_finding_line(finding))
    hidden = len(result.findings()) - len(shown)
    if hidden and verbosity > QUIET:
        out().print(f"[dim]{hidden} info row(s) not shown (--verbose shows them)[/]")


def _verdict(result: VerifyResult) -> str:
    verdict = {0: "[green]all gates passed[/]", 1: "[red]findings: verification failed[/]",
               3: "[bold magenta]a gate crashed[/]"}
    return f"{verdict.get(result.exit_code, str(result.exit_code))} in {result.seconds:.2f} s"


@human.register
def _verify(result: VerifyResult, verbosity: int = NORMAL) -> None:
    """Target statement, gate table, findings (info rows with --verbose), crash tracebacks, verdict."""
    line = _target_line(result)
    if line and (verbosity > QUIET or not result.target_check.exact):
        out().print(line)
    if verbosity > QUIET:
        out().print(_gate_table(result.gates, f"patchkit verify: {len(result.touched)} touched file(s)"))
    _findings(result, verbosity)
    for run in result.gates:
        if run.traceback:
            out().print(f"[bold magenta]gate {run.gate} crashed:[/]")
            say(run.traceback.rstrip())
    if result.junit:
        say(f"JUnit report: {result.junit}")
    out().print(_verdict(result))


@human.register
def _symbols(result: SymbolsResult, verbosity: int = NORMAL, limit: int = 6) -> None:
    """One block per name (defined / imported / used, with file:line), readable in CI logs too."""
    say(f"symbol family {result.family!r}: {len(result.symbols)} names")
    for symbol in result.symbols:
        say(f"{symbol.name} [{', '.join(symbol.kinds)}]")
        for label, places in (("defined", symbol.defined), ("imported", symbol.imported), ("used", symbol.used)):
            if places:
                shown = ", ".join(f"{p.file}:{p.line}" if p.line else p.file for p in places[:limit])
                more = f" (+{len(places) - limit} more)" if len(places) > limit else ""
                say(f"  {label:8} {len(places):3}  {shown}{more}")


@human.register
def _dispatch_sites(result: DispatchSitesResult, verbosity: int = NORMAL) -> None:
    say(f"wrote {result.path}: {result.kept} declaration(s) kept, {result.added} new site(s) to review")
    for dropped in result.dropped:
        say(f"  dropped (site no longer exists): {dropped}")
    if result.added:
        say("fill in treatment and reason for the new entries; the dispatch gate fails until then")
