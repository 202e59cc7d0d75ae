"""The bench's markdown report and its picture (tok/s against concurrency, accept length against
budget). matplotlib is an optional extra (``pip install 'patchkit[plot]'``); it is imported only here."""

from __future__ import annotations

import datetime as _dt
import platform
import sys
from collections.abc import Iterator
from pathlib import Path

from patchkit import __version__
from patchkit.bench.chisquare import ChiSquare
from patchkit.bench.measure import Histogram
from patchkit.bench.phases import PhaseStats
from patchkit.bench.results import BenchResult, LevelRun, Spread, VariantRun
from patchkit.bench.sampling import SamplingCheck


def fmt(value: float | None, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def spread_words(s: Spread | None, spec: str = ".1f") -> str:
    if s is None:
        return "-"
    return f"{s.mean:{spec}} ({s.min:{spec}}-{s.max:{spec}})" if s.max != s.min else f"{s.mean:{spec}}"


def lossless_words(level: LevelRun, checked: bool) -> str:
    if not checked or not level.compared:
        return "not checked"
    bad = len(level.mismatches)
    return "identical" if not bad else f"{bad}/{level.compared} DIFFER"


def histogram_words(hist: Histogram | None) -> str:
    if hist is None:
        return "-"
    total = sum(hist.counts.values())
    body = " ".join(f"{k}:{100 * n / total:.0f}%" for k, n in hist.counts.items()) if total else "none"
    left = f", {hist.left_out} requests left out (merged events)" if hist.left_out else ""
    return f"{body} ({hist.source}, {total} rounds{left})"


def speed_rows(result: BenchResult) -> Iterator[tuple[VariantRun, LevelRun]]:
    """(variant, level) rows of the speed table, shared by the markdown and the rich renderers."""
    for run in result.variants:
        for level in run.levels:
            yield run, level


def markdown(result: BenchResult) -> str:
    """The report: what ran, the speed table, histograms, ratios, projection, verdict."""
    gpus = ", ".join(f"{g.index}: {g.name}" for g in result.preflight.gpus) if result.preflight else ""
    lines = [f"# patchkit bench: {result.set_id}", "",
             f"- date: {_dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
             f"- patchkit {__version__}, Python {platform.python_version()}, command: `{' '.join(sys.argv)}`",
             f"- GPUs: {gpus or f'--gpus {result.gpus}'}",
             f"- prompts: {result.prompts} from `{result.prompt_file}`, {result.max_new_tokens} new tokens each, greedy"
             + (f"; skipped (text, no tokenizer): {', '.join(result.skipped_prompts)}"
                if result.skipped_prompts else ""),
             f"- levels: concurrency {', '.join(map(str, result.concurrency))}; {result.repeats} repeats after "
             f"{result.warmup} warm-up batch(es); logs: `{result.logs}`", ""]
    if result.mode == "sampling":
        return "\n".join([*lines, *sampling_markdown(result.sampling), "", verdict(result), ""])
    lines += ["## Speed (measured)", "",
              "| variant | concurrency | ready (s) | tok/s per request | tok/s aggregate | x baseline | x DFLASH "
              "| ms per round | accept length | TTFT (ms) | outputs |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run, level in speed_rows(result):
        lines.append(f"| {run.label} | {level.concurrency} | {fmt(run.ready_s, '.1f')} | "
                     f"{spread_words(level.per_request_tok_s)} "
                     f"| {spread_words(level.aggregate_tok_s)} | {spread_words(level.vs_baseline, '.2f')} | "
                     f"{vs_dflash_words(level.vs_dflash, level.dflash_reference, run.name)} | "
                     f"{spread_words(level.ms_per_round, '.2f')} | "
                     f"{fmt(level.accept_length, '.2f')} | {spread_words(level.ttft_ms, '.1f')} | "
                     f"{lossless_words(level, result.outputs_checked)} |")
    lines += ["", "Spread: mean (lowest-highest) over the repeats; ratios are aggregate tok/s, repeat by repeat. "
              "x DFLASH is against the faster DFLASH variant at that level (named).", ""]
    if result.phases:
        lines += phases_markdown(result)
    lines += ["## Accept-length histograms (share of verify rounds by tokens accepted, bonus included)", ""]
    for run, level in speed_rows(result):
        if level.histogram:
            lines.append(f"- {run.label}, concurrency {level.concurrency}: {histogram_words(level.histogram)}")
    if result.tree_gain:
        lines += ["", f"## Tree gain (expected >= {result.expected_tree_gain:g}x DFLASH's accept length)", ""]
        lines += [f"- {g.variant}: {g.accept_length:.2f} vs {g.dflash_accept_length:.2f} = {g.gain:.2f}x "
                  f"{'ok' if g.ok else 'BELOW'}" for g in result.tree_gain]
    if result.projection:
        lines += ["", "## Projected with a published acceptance table", "",
                  f"Accept lengths from `{result.projection.table}`: {result.projection.source}. "
                  "ms per round is **measured** here; accept length, tok/s and speed-ups are **projected** "
                  "(tok/s = accept length / ms per round).", "",
                  "| variant | concurrency | ms per round (measured) | accept length (table) | tok/s (projected) "
                  "| x DFLASH (projected) | x baseline (projected) |", "|---|---|---|---|---|---|---|"]
        for row in result.projection.rows:
            lines.append(f"| {row.variant} | {row.concurrency} | {fmt(row.measured_ms_per_round, '.2f')} | "
                         f"{fmt(row.accept_length, '.2f')} | {fmt(row.projected_tok_s, '.1f')} | "
                         f"{fmt(row.vs_dflash, '.2f')}{reference_words(row.dflash_reference)} | "
                         f"{fmt(row.vs_baseline, '.2f')} |" + (f" {row.note}" if row.note else ""))
    mismatched = [(run, level, m) for run, level in speed_rows(result) for m in level.mismatches]
    if mismatched:
        lines += ["", "## Mismatches against the baseline (first 20)", ""]
        lines += [f"- {run.label} c={level.concurrency} repeat {m.repeat} prompt {m.prompt_id}: first differs at "
                  f"{m.first_mismatch}: baseline {list(m.reference_continuation)} vs {list(m.continuation)}"
                  for run, level, m in mismatched[:20]]
    return "\n".join([*lines, "", verdict(result), ""])


def reference_words(reference: str | None) -> str:
    return f" (vs {reference})" if reference else ""


def vs_dflash_words(ratio: Spread | None, reference: str | None, variant: str) -> str:
    if ratio is None:
        return "-"
    if reference is None or reference == variant:
        return spread_words(ratio, ".2f")
    return f"{spread_words(ratio, '.2f')} (vs {reference})"


def phase_cells(stats: PhaseStats) -> tuple[str, ...]:
    g, h = stats.gpu_ms, stats.host_ms
    widths = " ".join(f"{w}:{n}" for w, n in stats.widths.items()) or "-"
    return (str(stats.rounds), f"{stats.mean_bs:.1f}",
            *(f"{g[column]:.2f}" for column in ("draft", "tree", "verify", "commit", "gap", "round")),
            f"{stats.round_p50_ms:.2f}", f"{stats.round_p99_ms:.2f}", f"{h['round']:.2f}",
            f"{100 * stats.draft_graph_share:.0f}%", f"{100 * stats.verify_graph_share:.0f}%",
            widths)


def phases_markdown(result: BenchResult) -> list[str]:
    lines = ["## Where a round's time goes (--phases)", "",
             "Device milliseconds per round from CUDA events on the forward stream, mean over the rounds that "
             "started in the level's measured repeats; gap = from the previous round's end to this round's start "
             "(scheduler and everything else between rounds); host round = the host's time issuing the round. "
             "Graph columns: share of rounds whose draft / verify replayed a CUDA graph; round p50 / p99: the "
             "device round's median and 99th percentile.", "",
             "| variant | concurrency | rounds | mean bs | draft | tree | verify | commit | gap | round "
             "| round p50 | round p99 | host round | draft graph | verify graph | verify widths (width:rounds) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run, level in speed_rows(result):
        if level.phases is not None:
            lines.append(f"| {run.label} | {level.concurrency} | {' | '.join(phase_cells(level.phases))} |")
        elif run.kind != "baseline":
            lines.append(f"| {run.label} | {level.concurrency} | no rounds timed |" + " |" * 13)
    return [*lines, ""]


def _cells(test: ChiSquare | None, threshold: float) -> str:
    """chi-square | df | p | verdict of one test; dashes when it was not run."""
    if test is None:
        return "- | - | - | -"
    verdict = "ok" if test.p_value >= threshold else "DIFFERS"
    return f"{test.statistic:.2f} | {test.df} | {test.p_value:.3g} | {verdict}"


def sampling_markdown(check: SamplingCheck | None) -> list[str]:
    if check is None:
        return []
    lines = ["## Sampling at T = 1 (chi-square per output position)", "",
             f"{check.samples} completions of {check.tokens} tokens of prompt {check.prompt_id}, seeds "
             f"{check.seed}..{check.seed + check.samples - 1}. At every position two tests: the drawn tokens "
             f"(rare ones pooled), and the target's log-probability of each drawn token (scored by the baseline "
             f"server, {check.logprob_bins} equal-frequency bins). A test fails below alpha / tests "
             f"(alpha = {check.alpha:g}, Bonferroni).", "",
             "| variant | position | tokens: chi-square | df | p-value | verdict "
             "| distinct tokens (baseline / variant) | log-probs: chi-square | df | p-value | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in check.variants:
        for p in v.positions:
            lines.append(f"| {v.label} | {p.position} | {_cells(p.test, v.threshold)} | "
                         f"{p.distinct_baseline} / {p.distinct_variant} | {_cells(p.logprob_test, v.threshold)} |")
        lines.append(f"| {v.label} | all | | | | | same output as the baseline for the same seed: "
                     f"{v.same_as_baseline}/{check.samples} | | | | |")
    for v in check.variants:
        scored = f"log-probs not scored: {v.logprob_note}" if v.logprob_note else "log-probs scored"
        lines += ["", f"{v.label}: {v.tests} tests, each fails below {v.threshold:.2g}; {scored}."]
    return lines


def verdict(result: BenchResult) -> str:
    if result.ok:
        return "bench: PASS"
    return "bench: FAIL: " + "; ".join(result.failures)


def plot_unavailable() -> str | None:
    """Why the plot cannot be drawn here (matplotlib missing), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        return str(error)
    return None


def plot(result: BenchResult, path: Path) -> str | None:
    """Draw tok/s against concurrency (one line per variant) and accept length against budget."""
    missing = plot_unavailable()
    if missing:
        return f"no plot: matplotlib is not importable ({missing}); pip install 'patchkit[plot]'"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, accept) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in result.variants:
        points = [(lv.concurrency, lv.aggregate_tok_s) for lv in run.levels if lv.aggregate_tok_s]
        if points:
            speed.errorbar([c for c, _ in points], [s.mean for _, s in points],
                           yerr=[[s.mean - s.min for _, s in points], [s.max - s.mean for _, s in points]],
                           marker="o", capsize=3, label=run.label)
    speed.set_xscale("log", base=2)
    speed.set_xlabel("concurrent requests")
    speed.set_ylabel("aggregate output tok/s")
    speed.set_title("speed (measured)")
    speed.legend(fontsize=8)
    trees = [r for r in result.variants if r.kind == "tree" and r.accept_length()]
    if trees:
        accept.plot([r.budget for r in trees], [r.accept_length() for r in trees], marker="o", label="DDTREE")
        accept.set_xscale("log", base=2)
    chain = next((r for r in result.variants if r.kind == "chain" and r.accept_length()), None)
    if chain:
        accept.axhline(chain.accept_length(), color="gray", linestyle="--", label="DFLASH")
    accept.set_xlabel("DDTREE budget (nodes)")
    accept.set_ylabel("mean accept length (tokens per round)")
    accept.set_title("acceptance (measured)")
    accept.legend(fontsize=8)
    fig.suptitle(f"patchkit bench {result.set_id}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
