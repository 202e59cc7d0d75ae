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
from patchkit.bench.sampling import SamplingCheck, VariantSampling


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


def set_words(result: BenchResult, level: LevelRun) -> str:
    """`` long-4096`` where a run measured several prompt sets, else nothing."""
    return f" {level.prompt_set}" if len(result.prompt_sets) > 1 else ""


def overlap_words(overlap: bool) -> str:
    return "on" if overlap else "off"


def start_words(run: VariantRun) -> str:
    """How a server's start went: ready, not started within --start-timeout, or failed."""
    if run.not_started:
        return run.not_started
    if run.ready_s is not None:
        return "ready"
    return f"FAILED: {run.failure}" if run.failure else "-"


def server_cells(run: VariantRun) -> tuple[str, ...]:
    """variant, backend, overlap, start-up (s), limit (s), start: one server's row."""
    return (run.label, run.backend, overlap_words(run.overlap), fmt(run.ready_s, ".1f"),
            fmt(run.start_limit_s, "g"), start_words(run))


def fastest_cells(result: BenchResult) -> Iterator[tuple[str, ...]]:
    """prompts, concurrency, variant, backend, overlap, tok/s: the DFLASH every ratio of a level is against."""
    for f in result.fastest_dflash:
        yield (f.prompt_set, str(f.concurrency), f.label, f.backend, overlap_words(f.overlap),
               f"{f.aggregate_tok_s:.1f}")


def prompt_set_words(result: BenchResult) -> list[str]:
    lines = []
    for s in result.prompt_sets:
        length = f", {s.mean_tokens:.0f} tokens on average" if s.mean_tokens is not None else ""
        how = "generated, " if s.generated else ""
        skipped = f"; skipped (text, no tokenizer): {', '.join(s.skipped)}" if s.skipped else ""
        lines.append(f"{s.name}: {s.prompts} prompts ({how}`{s.file}`){length}{skipped}")
    return lines


def shares_words(shares: dict[int, float]) -> str:
    """``{1: 0.25, 2: 0.5, ...}`` as ``1:25% 2:50% ...``, in power-of-two buckets past 4 values (1, 2-3, 4-7, ...)."""
    if len(shares) <= 4:
        return " ".join(f"{k}:{100 * v:.0f}%" for k, v in shares.items()) or "-"
    buckets: dict[tuple[int, int], float] = {}
    for k, v in shares.items():
        low = 1 << (k.bit_length() - 1)
        buckets[(low, 2 * low - 1)] = buckets.get((low, 2 * low - 1), 0.0) + v
    return " ".join((f"{lo}" if lo == hi else f"{lo}-{hi}") + f":{100 * v:.0f}%" for (lo, hi), v in buckets.items())


def batch_words(stats: PhaseStats | None) -> str:
    """The batch sizes the server ran, as shares of its rounds (from its round records)."""
    if stats is None or not stats.batch_sizes:
        return "-"
    rounds = sum(stats.batch_sizes.values())
    return shares_words({bs: n / rounds for bs, n in stats.batch_sizes.items()})


def load_cells(run: VariantRun, level: LevelRun) -> tuple[str, ...]:
    """One changing-load row: requests, tokens asked, tok/s, in flight, server batch sizes, round p50/p99."""
    load, timed = level.load, level.phases
    assert load is not None
    return (run.label, level.prompt_set, str(level.concurrency), str(load.requests),
            f"{load.tokens_min}-{load.tokens_max}", spread_words(level.aggregate_tok_s),
            vs_dflash_words(level.vs_dflash, level.dflash_reference, run.name),
            f"{load.mean_in_flight:.1f} ({shares_words(load.in_flight)})",
            batch_words(timed) + (f" (mean {timed.mean_bs:.1f})" if timed else ""),
            f"{timed.round_p50_ms:.2f} / {timed.round_p99_ms:.2f}" if timed else "-",
            f"{fmt(load.request_round_p50_ms, '.2f')} / {fmt(load.request_round_p99_ms, '.2f')}")


LOAD_HEADER = ("variant", "prompts", "concurrency", "requests", "tokens asked", "tok/s aggregate", "x DFLASH",
               "in flight: mean (share of time)", "server batch sizes (share of rounds)",
               "device round p50 / p99 (ms)", "ms per round p50 / p99 (per request)")


def phase_quantile_cells(stats: PhaseStats) -> tuple[str, ...]:
    """p50 / p99 of each phase and the whole round (device ms)."""
    return tuple(f"{stats.gpu_p50_ms.get(c, 0.0):.2f} / {stats.gpu_p99_ms.get(c, 0.0):.2f}"
                 for c in ("draft", "tree", "verify", "commit", "gap", "round"))


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
             *(f"- prompt set {words}" for words in prompt_set_words(result) if len(result.prompt_sets) > 1),
             f"- levels: concurrency {', '.join(map(str, result.concurrency))}; {result.repeats} repeats after "
             f"{result.warmup} warm-up batch(es); logs: `{result.logs}`",
             *([f"- load: changing (requests arrive and finish at different times; {CHANGING_LOAD_WORDS})"]
               if result.changing_load else []),
             *(f"- note: {note}" for note in result.notes), ""]
    if result.mode == "sampling":
        return "\n".join([*lines, *sampling_markdown(result.sampling), "", verdict(result), ""])
    lines += ["## Servers", "",
              "| variant | attention backend | overlap | start-up (s) | start limit (s) | start |",
              "|---|---|---|---|---|---|",
              *(f"| {' | '.join(server_cells(run))} |" for run in result.variants), ""]
    if result.fastest_dflash:
        lines += ["## Fastest DFLASH per level (every x DFLASH is against it)", "",
                  "| prompts | concurrency | variant | attention backend | overlap | tok/s aggregate |",
                  "|---|---|---|---|---|---|", *(f"| {' | '.join(cells)} |" for cells in fastest_cells(result)), ""]
    lines += ["## Speed (measured)", "",
              "| variant | prompts | concurrency | ready (s) | tok/s per request | tok/s aggregate | x baseline "
              "| x DFLASH | ms per round | accept length | TTFT (ms) | outputs |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run, level in speed_rows(result):
        lines.append(f"| {run.label} | {level.prompt_set} | {level.concurrency} | {fmt(run.ready_s, '.1f')} | "
                     f"{spread_words(level.per_request_tok_s)} "
                     f"| {spread_words(level.aggregate_tok_s)} | "
                     f"{vs_dflash_words(level.vs_baseline, level.baseline_reference, run.name)} | "
                     f"{vs_dflash_words(level.vs_dflash, level.dflash_reference, run.name)} | "
                     f"{spread_words(level.ms_per_round, '.2f')} | "
                     f"{fmt(level.accept_length, '.2f')} | {spread_words(level.ttft_ms, '.1f')} | "
                     f"{lossless_words(level, result.outputs_checked)} |")
    lines += ["", "Spread: mean (lowest-highest) over the repeats; ratios are aggregate tok/s, repeat by repeat. "
              "x DFLASH is against the fastest DFLASH configuration at that prompt set and level (named when it is "
              "another variant).", ""]
    if result.changing_load:
        lines += load_markdown(result)
    if result.phases or result.changing_load:
        lines += phases_markdown(result)
    lines += ["## Accept-length histograms (share of verify rounds by tokens accepted, bonus included)", ""]
    for run, level in speed_rows(result):
        if level.histogram:
            lines.append(f"- {run.label}{set_words(result, level)}, concurrency {level.concurrency}: "
                         f"{histogram_words(level.histogram)}")
    if result.tree_gain:
        lines += ["", f"## Tree gain (expected >= {result.expected_tree_gain:g}x DFLASH's accept length)", ""]
        lines += [f"- {g.variant}: {g.accept_length:.2f} vs {g.dflash_accept_length:.2f} = {g.gain:.2f}x "
                  f"{'ok' if g.ok else 'BELOW'}" for g in result.tree_gain]
    if result.projection:
        lines += ["", "## Projected with a published acceptance table", "",
                  f"Accept lengths from `{result.projection.table}`: {result.projection.source}. "
                  "ms per round is **measured** here; accept length, tok/s and speed-ups are **projected** "
                  "(tok/s = accept length / ms per round).", "",
                  "| variant | prompts | concurrency | ms per round (measured) | accept length (table) "
                  "| tok/s (projected) | x DFLASH (projected) | x baseline (projected) |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in result.projection.rows:
            lines.append(f"| {row.variant} | {row.prompt_set} | {row.concurrency} | "
                         f"{fmt(row.measured_ms_per_round, '.2f')} | "
                         f"{fmt(row.accept_length, '.2f')} | {fmt(row.projected_tok_s, '.1f')} | "
                         f"{fmt(row.vs_dflash, '.2f')}{reference_words(row.dflash_reference)} | "
                         f"{fmt(row.vs_baseline, '.2f')} |" + (f" {row.note}" if row.note else ""))
    mismatched = [(run, level, m) for run, level in speed_rows(result) for m in level.mismatches]
    if mismatched:
        lines += ["", "## Mismatches against the baseline (first 20)", ""]
        lines += [f"- {run.label}{set_words(result, level)} c={level.concurrency} repeat {m.repeat} "
                  f"prompt {m.prompt_id}: first differs at "
                  f"{m.first_mismatch}: baseline {list(m.reference_continuation)} vs {list(m.continuation)}"
                  for run, level, m in mismatched[:20]]
    return "\n".join([*lines, "", verdict(result), ""])


def reference_words(reference: str | None) -> str:
    return f" (vs {reference})" if reference else ""


def vs_dflash_words(ratio: Spread | None, reference: str | None, variant: str) -> str:
    """A ratio, naming the variant it is over when that is another one (the fastest DFLASH, say)."""
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
             "| variant | prompts | concurrency | rounds | mean bs | draft | tree | verify | commit | gap | round "
             "| round p50 | round p99 | host round | draft graph | verify graph | verify widths (width:rounds) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    quantiles = ["", "p50 / p99 of each phase (device ms):", "",
                 "| variant | prompts | concurrency | draft | tree | verify | commit | gap | round |",
                 "|---|---|---|---|---|---|---|---|---|"]
    for run, level in speed_rows(result):
        where = f"| {run.label} | {level.prompt_set} | {level.concurrency} |"
        if level.phases is not None:
            lines.append(f"{where} {' | '.join(phase_cells(level.phases))} |")
            quantiles.append(f"{where} {' | '.join(phase_quantile_cells(level.phases))} |")
        elif run.kind != "baseline":
            lines.append(f"{where} no rounds timed |" + " |" * 13)
    return [*lines, *quantiles, ""]


CHANGING_LOAD_WORDS = ("each request asks for a seeded length between a quarter of the new tokens and all of them; "
                       "the number in flight follows a seeded target from 1 to the level's concurrency, drawn "
                       "again at every finish")


def load_markdown(result: BenchResult) -> list[str]:
    lines = ["## Changing load", "",
             f"Per level: {CHANGING_LOAD_WORDS}. In flight: the client's requests in flight, mean and share of "
             "the level's time; server batch sizes: the batch size of each speculative round the server timed "
             "(share of rounds; none for the baseline); device round: from the server's round records; ms per "
             "round per request: the client's (last event - first token) / rounds.", "",
             f"| {' | '.join(LOAD_HEADER)} |", "|" + "---|" * len(LOAD_HEADER)]
    lines += [f"| {' | '.join(load_cells(run, level))} |" for run, level in speed_rows(result) if level.load]
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
        lines += ["", f"{v.label}: {v.tests} tests, each fails below {v.threshold:.2g}; {scored}.",
                  f"{v.label}: {power_words(check, v)}.", f"{v.label}: {tree_words(v)}."]
    return lines


def power_words(check: SamplingCheck, v: VariantSampling) -> str:
    """The power the run had against the stated distortion (patchkit.bench.power), at its threshold."""
    if v.power is None:
        return "power not computed"
    return (f"power {v.power:.3f} against {check.distortion} at {check.samples} samples and this threshold "
            f"(the default count aims at {check.target_power:g})")


def tree_words(v: VariantSampling) -> str:
    """How much of the server's rounds went through a tree, not the draft's chain."""
    usage = v.tree
    if usage is None:
        return f"tree use not counted: {v.tree_note}"
    words = (f"tree: {usage.branched} of {usage.request_rounds} request-rounds ({usage.rounds} rounds) verified a "
             f"branching tree; {usage.off_chain} accepted a path off the draft's top-1 chain; "
             f"{usage.off_chain_tokens} of {usage.accepted_tokens} accepted drafted tokens came off the chain")
    return words if usage.exercised else words + "; the tree was NOT EXERCISED: this pass says nothing about it"


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
    several = len(result.prompt_sets) > 1
    for run in result.variants:
        for prompt_set in dict.fromkeys(lv.prompt_set for lv in run.levels):
            points = [(lv.concurrency, lv.aggregate_tok_s) for lv in run.levels
                      if lv.aggregate_tok_s and lv.prompt_set == prompt_set]
            if points:
                speed.errorbar([c for c, _ in points], [s.mean for _, s in points],
                               yerr=[[s.mean - s.min for _, s in points], [s.max - s.mean for _, s in points]],
                               marker="o", capsize=3, label=f"{run.label} ({prompt_set})" if several else run.label)
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
