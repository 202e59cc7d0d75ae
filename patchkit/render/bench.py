"""Human output of ``patchkit bench``: the speed table, histograms, tree gain, projection, or the
sampling table; the verdict last. ``--json`` goes through the common envelope."""

from __future__ import annotations

from patchkit.bench import report
from patchkit.bench.chisquare import ChiSquare
from patchkit.bench.results import BenchResult
from patchkit.render import NORMAL, QUIET, human, out, say, table


def _servers(result: BenchResult) -> None:
    shown = table("variant", "backend", "overlap", "start-up s", "limit s", "start",
                  title="servers (one at a time): attention backend, overlap scheduler, start-up time")
    for run in result.variants:
        shown.add_row(*report.server_cells(run))
    out().print(shown)
    if result.fastest_dflash:
        fastest = table("prompts", "conc.", "variant", "backend", "overlap", "tok/s agg",
                        title="fastest DFLASH per level (every x DFLASH is against it)")
        for cells in report.fastest_cells(result):
            fastest.add_row(*cells)
        out().print(fastest)


def _speed(result: BenchResult) -> None:
    _servers(result)
    sets = ", ".join(f"{s.name} ({s.prompts})" for s in result.prompt_sets) or str(result.prompts)
    shown = table("variant", "prompts", "conc.", "ready s", "tok/s/req", "tok/s agg", "x base", "x DFLASH", "ms/round",
                  "accept", "TTFT ms", "outputs",
                  title=f"bench {result.set_id}: prompts {sets} x {result.max_new_tokens} tokens, "
                        f"{result.repeats} repeats{' under a changing load' if result.changing_load else ''} "
                        f"(mean, lowest-highest)")
    for run, level in report.speed_rows(result):
        shown.add_row(run.label, level.prompt_set, str(level.concurrency), report.fmt(run.ready_s, ".1f"),
                      report.spread_words(level.per_request_tok_s), report.spread_words(level.aggregate_tok_s),
                      report.vs_dflash_words(level.vs_baseline, level.baseline_reference, run.name),
                      report.vs_dflash_words(level.vs_dflash, level.dflash_reference, run.name),
                      report.spread_words(level.ms_per_round, ".2f"), report.fmt(level.accept_length, ".2f"),
                      report.spread_words(level.ttft_ms, ".1f"), report.lossless_words(level, result.outputs_checked))
    out().print(shown)
    for run, level in report.speed_rows(result):
        if level.histogram:
            say(f"accept lengths {run.label}{report.set_words(result, level)} c={level.concurrency}: "
                f"{report.histogram_words(level.histogram)}")
    if result.changing_load:
        _load(result)
    if result.phases or result.changing_load:
        _phases(result)
    for note in result.notes:
        say(f"note: {note}")
    for gain in result.tree_gain:
        say(f"tree gain {gain.variant}: {gain.accept_length:.2f} / {gain.dflash_accept_length:.2f} = {gain.gain:.2f}x "
            f"({'ok' if gain.ok else 'BELOW'} the expected {result.expected_tree_gain:g}x)")
    if result.projection:
        projected = table("variant", "prompts", "conc.", "ms/round MEASURED", "accept (table)", "tok/s PROJECTED",
                          "x DFLASH PROJECTED", "x base PROJECTED", "note",
                          title=f"projected with {result.projection.table.name} ({result.projection.source})")
        for row in result.projection.rows:
            projected.add_row(row.variant, row.prompt_set, str(row.concurrency),
                              report.fmt(row.measured_ms_per_round, ".2f"),
                              report.fmt(row.accept_length, ".2f"), report.fmt(row.projected_tok_s, ".1f"),
                              report.fmt(row.vs_dflash, ".2f") + (f" (vs {row.dflash_reference})"
                                                                  if row.dflash_reference else ""),
                              report.fmt(row.vs_baseline, ".2f"), row.note)
        out().print(projected)


def _phases(result: BenchResult) -> None:
    shown = table("variant", "prompts", "conc.", "rounds", "mean bs", "draft", "tree", "verify", "commit", "gap",
                  "round", "round p50", "round p99", "host round", "draft graph", "verify graph", "widths",
                  title="where a round's time goes (device ms per round, CUDA events; host round = issuing it)")
    quantiles = table("variant", "prompts", "conc.", "draft", "tree", "verify", "commit", "gap", "round",
                      title="p50 / p99 of each phase (device ms)")
    for run, level in report.speed_rows(result):
        if level.phases is not None:
            shown.add_row(run.label, level.prompt_set, str(level.concurrency), *report.phase_cells(level.phases))
            quantiles.add_row(run.label, level.prompt_set, str(level.concurrency),
                              *report.phase_quantile_cells(level.phases))
    out().print(shown)
    out().print(quantiles)


def _load(result: BenchResult) -> None:
    shown = table(*report.LOAD_HEADER, title=f"changing load: {report.CHANGING_LOAD_WORDS}")
    for run, level in report.speed_rows(result):
        if level.load is not None:
            shown.add_row(*report.load_cells(run, level))
    out().print(shown)


def _mismatches(result: BenchResult) -> None:
    for run, level in report.speed_rows(result):
        for m in level.mismatches[:5]:
            say(f"MISMATCH {run.label}{report.set_words(result, level)} c={level.concurrency} repeat {m.repeat} "
                f"prompt {m.prompt_id} at "
                f"{m.first_mismatch}: baseline {list(m.reference_continuation)} vs {list(m.continuation)}")


def _test_cells(test: ChiSquare | None, threshold: float) -> list[str]:
    if test is None:
        return ["-", "-", "-", "-"]
    return [f"{test.statistic:.2f}", str(test.df), f"{test.p_value:.3g}",
            "ok" if test.p_value >= threshold else "DIFFERS"]


def _sampling(result: BenchResult) -> None:
    check = result.sampling
    assert check is not None
    shown = table("variant", "pos", "tokens chi2", "df", "p", "verdict", "distinct (base/var)", "log-probs chi2",
                  "df", "p", "verdict",
                  title=f"sampling at T=1: {check.samples} x {check.tokens} tokens, prompt {check.prompt_id}; "
                        f"per position the drawn tokens and their log-probs under the target "
                        f"({check.logprob_bins} bins), fail below p = {check.alpha:g} / tests")
    for v in check.variants:
        for p in v.positions:
            shown.add_row(v.label, str(p.position), *_test_cells(p.test, v.threshold),
                          f"{p.distinct_baseline}/{p.distinct_variant}", *_test_cells(p.logprob_test, v.threshold))
    out().print(shown)
    for v in check.variants:
        scored = f"log-probs not scored: {v.logprob_note}" if v.logprob_note else "log-probs scored"
        say(f"{v.label}: {v.tests} tests, each fails below {v.threshold:.2g}; {scored}; same output as the "
            f"baseline for the same seed in {v.same_as_baseline}/{check.samples}")
        say(f"{v.label}: {report.power_words(check, v)}")
        say(f"{v.label}: {report.tree_words(v)}")


def _server_failures(result: BenchResult) -> None:
    served = [(r.label, r.failure, r.log, r.log_tail) for r in result.variants]
    if result.sampling:
        served += [(s.name, s.failure, s.log, s.log_tail) for s in result.sampling.servers]
    for label, failure, log, tail in served:
        if failure and any(r.label == label and r.not_started for r in result.variants):
            say(f"{label} server not started: {failure}\n  log: {log}")
        elif failure:
            say(f"{label} server failed: {failure}\n  log: {log}")
            if tail:
                say("  last log lines:\n    " + tail.replace("\n", "\n    "))


@human.register
def _human_bench(result: BenchResult, verbosity: int = NORMAL) -> None:
    if verbosity > QUIET:
        if result.mode == "sampling":
            _sampling(result)
        else:
            _speed(result)
    _mismatches(result)
    _server_failures(result)
    for path, what in ((result.report, "report"), (result.plot, "plot")):
        if path:
            say(f"{what}: {path}")
    if result.plot_note:
        say(result.plot_note)
    say(f"{report.verdict(result)}; logs in {result.logs}")
