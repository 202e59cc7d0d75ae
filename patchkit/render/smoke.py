"""Human output of ``patchkit smoke``: the live view while servers start, then the result tables."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rich.markup import escape

from patchkit.render import NORMAL, QUIET, err, human, out, say, table
from patchkit.smoke.run import ServerRun, SmokeResult


class _SmokeStatus:
    """A rich spinner whose text may carry raw log lines (escaped, so brackets stay text)."""

    def __init__(self, status: Any) -> None:
        self._status = status

    def update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(escape(text[:160]))


class SmokeConsole:
    """The smoke run's live view on stderr: a spinner with the server's last log line, and notes."""

    def __init__(self, verbosity: int = NORMAL) -> None:
        self.verbosity = verbosity

    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[_SmokeStatus]:
        if self.verbosity <= QUIET or not err().is_terminal:
            yield _SmokeStatus(None)
            return
        with err().status(escape(text)) as status:
            yield _SmokeStatus(status)

    def note(self, text: str) -> None:
        if self.verbosity > QUIET:
            err().print(text, markup=False)


def _fmt(value: float | None, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def _smoke_preflight(result: SmokeResult) -> None:
    shown = table("check", "result", "detail", title=f"preflight ({result.set_id}, --gpus {result.gpus})",
                  show_header=False)
    for check in result.preflight.checks:
        shown.add_row(check.name, "ok" if check.ok else "FAILED", check.detail)
    out().print(shown)


def _smoke_servers(servers: tuple[ServerRun, ...]) -> None:
    shown = table("server", "ready", "tokens/s", "TTFT", "accept length", "verify steps", "teardown", title="servers")
    for run in servers:
        stats, down = run.stats, run.teardown
        ending = "SIGKILL" if down.sigkill_sent else "SIGTERM" if down.sigterm_sent else f"exited ({down.exit_code})"
        ending += ", clean" if down.clean else f", LEFT {list(down.leftover_pids)}"
        shown.add_row(run.role, _fmt(run.ready_s, ".1f") + ("s" if run.ready_s is not None else ""),
                      _fmt(stats.tokens_per_s if stats.prompts else None, ".1f"),
                      _fmt(stats.ttft_s * 1000 if stats.prompts else None, ".0f") + (" ms" if stats.prompts else ""),
                      _fmt(stats.accept_length, ".2f"), _fmt(stats.verify_ct, "d"), ending)
    out().print(shown)
    for run in servers:
        if run.failure:
            say(f"{run.role} server failed: {run.failure}\n  log: {run.log}")
            if run.log_tail:
                say("  last log lines:\n    " + run.log_tail.replace("\n", "\n    "))


def _smoke_prompts(result: SmokeResult) -> None:
    shown = table("prompt", "result", "tokens", "first mismatch", "baseline from there", "DDTREE from there",
                  title="baseline vs DDTREE (greedy)")
    for item in result.prompts:
        shown.add_row(item.prompt_id, "identical" if item.matched else "MISMATCH",
                      f"{item.baseline_tokens}/{item.ddtree_tokens}", _fmt(item.first_mismatch, "d"),
                      " ".join(map(str, item.baseline_continuation)), " ".join(map(str, item.ddtree_continuation)))
    out().print(shown)
    if result.skipped_prompts:
        say(f"skipped (text prompts, server has no tokenizer): {', '.join(result.skipped_prompts)}")


@human.register
def _human_smoke(result: SmokeResult, verbosity: int = NORMAL) -> None:
    if verbosity > QUIET:
        _smoke_preflight(result)
    if result.preflight_only:
        verdict = "passed" if result.ok else "FAILED"
        say(f"smoke: preflight {verdict} (nothing started)")
        return
    if verbosity > QUIET:
        _smoke_servers(result.servers)
        if result.prompts:
            _smoke_prompts(result)
    matched = sum(p.matched for p in result.prompts)
    verdict = "PASS" if result.ok else "FAIL"
    speed = f", DDTREE at {result.speedup:.2f}x baseline tokens/s" if result.speedup else ""
    say(f"smoke: {verdict}: {matched}/{len(result.prompts)} prompts identical, "
        f"{result.mismatches} mismatched{speed}; logs in {result.logs}")
