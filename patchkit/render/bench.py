"""People's view of ``patchkit bench`` (rich tables); ``--json`` goes through the common envelope."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from patchkit.bench import report
from patchkit.bench.run import BenchResult


#: Width of the tables when stdout is not a terminal (logs, CI): wide enough for every column.
LOG_WIDTH = 220


def _print_table(stdout, table: Table) -> None:
    if stdout.is_terminal:
        stdout.print(table)
    else:  # a log or a pipe: no terminal width to respect, so no column is cut
        Console(file=stdout.file, width=LOG_WIDTH, highlight=False, soft_wrap=True).print(table)


def render_bench(result: BenchResult, stdout, human) -> None:
    say = lambda text: stdout.print(text, markup=False)  # noqa: E731
    if result.mode == "sampling":
        _sampling(result, stdout, say)
    else:
        _speed(result, stdout, say)
    for run in result.variants:
        if run.failure:
            say(f"{run.label} server failed: {run.failure}\n  log: {run.log}")
            if run.log_tail:
                say("  last log lines:\n    " + run.log_tail.replace("\n", "\n    "))
    if result.report:
        say(f"report: {result.report}")
    if result.plot:
        say(f"plot: {result.plot}")
    if result.plot_note:
        say(result.plot_note)
    say(f"{report.verdict(result)}; logs in {result.logs}")


def _speed(result: BenchResult, stdout, say) -> None:
    table = Table(title=f"bench {result.set_id}: {result.prompts} prompts x {result.max_new_tokens} tokens, "
                        f"{result.repeats} repeats (mean, lowest-highest)")
    for column in ("variant", "conc.", "ready s", "tok/s/req", "tok/s agg", "x base", "x DFLASH", "ms/round",
                   "accept", "TTFT ms", "outputs"):
        table.add_column(column)
    for run, level in report.speed_rows(result):
        table.add_row(run.label, str(level.concurrency), report._f(run.ready_s, ".1f"),
                      report._spread(level.per_request_tok_s), report._spread(level.aggregate_tok_s),
                      report._spread(level.vs_baseline, ".2f"), report._spread(level.vs_dflash, ".2f"),
                      report._spread(level.ms_per_round, ".2f"), report._f(level.accept_length, ".2f"),
                      report._spread(level.ttft_ms, ".1f"), report.lossless_words(level, result.outputs_checked))
    _print_table(stdout, table)
    for run, level in report.speed_rows(result):
        if level.histogram:
            say(f"accept lengths {run.label} c={level.concurrency}: {report.histogram_words(level.histogram)}")
    for gain in result.tree_gain:
        say(f"tree gain {gain.variant}: {gain.accept_length:.2f} / {gain.dflash_accept_length:.2f} = {gain.gain:.2f}x "
            f"({'ok' if gain.ok else 'BELOW'} the expected {result.expected_tree_gain:g}x)")
    for run, level in report.speed_rows(result):
        for m in level.mismatches[:5]:
            say(f"MISMATCH {run.label} c={level.concurrency} repeat {m.repeat} prompt {m.prompt_id} at {m.first_mismatch}: "
                f"baseline {list(m.reference_continuation)} vs {list(m.continuation)}")
    if result.projection:
        proj = Table(title=f"projected with {result.projection.table.name} ({result.projection.source})")
        for column in ("variant", "conc.", "ms/round MEASURED", "accept (table)", "tok/s PROJECTED",
                       "x DFLASH PROJECTED", "x base PROJECTED", "note"):
            proj.add_column(column)
        for row in result.projection.rows:
            proj.add_row(row.variant, str(row.concurrency), report._f(row.measured_ms_per_round, ".2f"),
                         report._f(row.accept_length, ".2f"), report._f(row.projected_tok_s, ".1f"),
                         report._f(row.vs_dflash, ".2f"), report._f(row.vs_baseline, ".2f"), row.note)
        _print_table(stdout, proj)


def _sampling(result: BenchResult, stdout, say) -> None:
    check = result.sampling
    table = Table(title=f"sampling at T=1: {check.samples} x {check.tokens} tokens, prompt {check.prompt_id}, "
                        f"fail below p = {check.alpha:g} / {check.tokens}")
    for column in ("variant", "position", "chi-square", "df", "p-value", "distinct (base/var)", "verdict"):
        table.add_column(column)
    for v in check.variants:
        for p in v.positions:
            table.add_row(v.label, str(p.position), f"{p.test.statistic:.2f}", str(p.test.df), f"{p.test.p_value:.3g}",
                          f"{p.distinct_baseline}/{p.distinct_variant}",
                          "ok" if p.test.p_value >= v.threshold else "DIFFERS")
    _print_table(stdout, table)
    for v in check.variants:
        say(f"{v.label}: same output as the baseline for the same seed in {v.same_as_baseline}/{check.samples}")
    for served in check.servers:
        if served.failure:
            say(f"{served.name} server failed: {served.failure}\n  log: {served.log}")
